# sources: where the suites' third-party sources come from (SchedMD's Slurm
# releases, enroot, pyxis, Apptainer). mk/sources.txt pins each one (version
# or commit, archive, SHA-256, contents, public URL); scripts/sources.sh finds
# it in the machine's cache (GPUSLICE_CACHE/sources), then in a directory of
# archives (GPUSLICE_SOURCES, checked against its SHA256SUMS and the pins),
# then at its public URL (kept in the cache), else says what is missing and
# the build of what needs it writes UNAVAILABLE, which its tests skip with.
#
# GPUSLICE_SOURCES defaults to shared/third_party in the checkout's parent
# directory when there is one.
SOURCES_TABLE := $(ROOT)/mk/sources.txt
SOURCES_SH    := $(ROOT)/scripts/sources.sh
GPUSLICE_SOURCES ?= $(wildcard $(abspath $(ROOT)/../shared/third_party))
# src_field NAME,COLUMN: one column of NAME's row of mk/sources.txt.
src_field = $(shell awk '$$1 == "$(1)" {print $$$(2)}' $(SOURCES_TABLE))
# Column numbers of mk/sources.txt.
SRC_VERSION := 2
SRC_ARCHIVE := 3
SRC_SHA256  := 4
# The environment scripts/sources.sh reads.
SOURCES_ENV = GPUSLICE_CACHE='$(GPUSLICE_CACHE)' GPUSLICE_SOURCES='$(GPUSLICE_SOURCES)'
