# slurm-src: SchedMD's Slurm releases built from their source, each as a GPU
# cluster runs it (slurmctld, slurmd, slurmstepd, slurmdbd with MariaDB
# storage, the client commands, cgroup/v2, job_submit/lua, hwloc, munge),
# into a relocatable tree of its own: build/slurm/RELEASE (bin, sbin, lib,
# lib/slurm, include, etc). scripts/slurm-src.sh builds one and says what
# is in it; the releases and their archives are the slurm-* rows of
# mk/sources.txt, found by scripts/sources.sh (mk/sources.mk).
#
# Each built tree is kept as a tarball in SLURM_SRC_CACHE (default in
# GPUSLICE_CACHE, kept across clones and `make clean`), keyed by the
# archive's SHA-256, the configure options, the script's LAYOUT and the
# distribution: a fresh clone, at any path, unpacks it in seconds. A first
# build takes about 2 minutes a release on 2 cores, 11 for the five; from the
# cache all five take about 11 s (docs/developer.md). Without a
# source the target still succeeds but writes build/slurm/RELEASE/UNAVAILABLE
# (and tries again next time); what needs the release skips with it.
#
# `make build` does not need these; the plugin for each (make spank-RELEASE,
# mk/spank.mk) and the suites that run on them do.
SLURM_SRC       := $(BUILD)/slurm
SLURM_SRC_CACHE ?= $(GPUSLICE_CACHE)/slurm
SLURM_SRC_SH    := $(ROOT)/scripts/slurm-src.sh
# NVIDIA's nvml.h, which gpu/nvml is compiled against: the one of the go-nvml
# module gpusliced is built with (downloaded through the module proxy when
# the module cache lacks it). Evaluated only when a release is built.
SLURM_NVML_H = $(shell cd $(ROOT) && $(GO) mod download -json github.com/NVIDIA/go-nvml | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p')/pkg/nvml/nvml.h
# 23.11 24.05 25.05 25.11 26.05
SLURM_SRC_RELEASES := $(shell awk '$$1 ~ /^slurm-/ {sub(/^slurm-/, "", $$1); print $$1}' $(SOURCES_TABLE))

.PHONY: slurm-src slurm-src-clean
slurm-src: $(SLURM_SRC_RELEASES:%=slurm-src-%) ## build every SchedMD Slurm release of mk/sources.txt into build/slurm/RELEASE (make slurm-src-25.05: one; cached in SLURM_SRC_CACHE)

slurm-src-clean: ## remove build/slurm (the cache in SLURM_SRC_CACHE stays)
	rm -rf $(SLURM_SRC)

# slurm-src-RELEASE, one target each (make help lists slurm-src only).
define slurm_src_release
.PHONY: slurm-src-$(1)
slurm-src-$(1): $(SLURM_SRC)/$(1)/.stamp
endef
$(foreach r,$(SLURM_SRC_RELEASES),$(eval $(call slurm_src_release,$(r))))

$(SLURM_SRC)/%/.stamp: $(SOURCES_TABLE) $(SOURCES_SH) $(SLURM_SRC_SH) $(TREE_CACHE)
	@rm -f $@ $(@D)/UNAVAILABLE
	@rc=0; $(SOURCES_ENV) SLURM_NVML_H='$(SLURM_NVML_H)' $(SLURM_SRC_SH) build $* $(@D) $(SLURM_SRC_CACHE) || rc=$$?; \
	if [ $$rc = 3 ]; then echo "slurm-src-$*: not built: $$(cat $(@D)/UNAVAILABLE)" >&2; \
	elif [ $$rc != 0 ]; then exit $$rc; else touch $@; fi

# The plugin for every release loaded by that release's own srun, the
# sources table and its resolver (tests/slurmsrc). A release that is not
# built skips with one line; under CI=true one whose sources are here fails
# instead. Part of `make test`, after test-slurm-all has built every
# release (a first build of the five takes about 11 minutes on 2 cores);
# with everything built the target takes about 4 s, the tests 2 s.
.PHONY: test-slurm-src
test-slurm-src: spank-releases ## build every Slurm release and its plugin, and check each release's srun loads it (tests/slurmsrc)
	GPUSLICE_BUILD_DIR=$(BUILD) $(SOURCES_ENV) $(GO) test -count=1 -timeout 10m ./tests/slurmsrc/

# ---- The end-to-end suite on SchedMD's releases (tests/slurm) -----------------
# make test-slurm-RELEASE runs tests/slurm on build/slurm/RELEASE with the
# plugin built for it (GPUSLICE_SLURM_RELEASE=RELEASE; what differs between
# releases is tests/slurm/slurmconf_test.go's table), and job_submit.lua's
# unit tests on Lua 5.4, which that release's job_submit/lua links: the
# full suite on 26.05, then its cluster with a node of four GPUs
# (SLURM_QUAD_TESTS, mk/spank.mk), the core subset on the others (the rest
# skip; see docs/slurm-releases.md). Each release has its own
# bridge, subnet, lock and /tmp prefix, so they may run at once and beside
# the runs on 22.05 and 24.11. run-slurm-core runs the core subsets one
# after the other (make test-slurm-all runs each after a full suite, in
# the lanes of mk/trixie.mk).
SLURM_E2E_FULL := 26.05
SLURM_E2E_CORE := $(filter-out $(SLURM_E2E_FULL),$(SLURM_SRC_RELEASES))

define slurm_e2e_release
.PHONY: test-slurm-$(1) run-slurm-$(1)
test-slurm-$(1): spank-$(1) $(SLURM_TEST_DEPS)
	@$(MAKE) --no-print-directory run-slurm-$(1)
run-slurm-$(1):
	lua5.4 tests/slurm/lua/job_submit_test.lua etc/slurm/job_submit.lua
	GPUSLICE_SLURM_RELEASE=$(1) GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 35m ./tests/slurm/
$(if $(filter $(1),$(SLURM_E2E_FULL)),	GPUSLICE_SLURM_QUAD=1 GPUSLICE_SLURM_RELEASE=$(1) GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 10m -run '$$(SLURM_QUAD_TESTS)' ./tests/slurm/)
endef
$(foreach r,$(SLURM_SRC_RELEASES),$(eval $(call slurm_e2e_release,$(r))))

.PHONY: test-slurm-core run-slurm-core
test-slurm-core: $(SLURM_E2E_CORE:%=spank-%) $(SLURM_TEST_DEPS) ## the e2e core subset on SchedMD's 23.11, 24.05, 25.05, 25.11, one after the other (make test-slurm-RELEASE: one release; 26.05 runs the full suite) (root)
	@$(MAKE) --no-print-directory run-slurm-core
run-slurm-core:
	@rc=0; for r in $(SLURM_E2E_CORE); do \
	  start=$$(date +%s); $(MAKE) --no-print-directory run-slurm-$$r || rc=1; \
	  echo "run-slurm-core: Slurm $$r: $$(( $$(date +%s) - start )) s"; done; exit $$rc
