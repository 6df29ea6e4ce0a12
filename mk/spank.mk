# spank: the SPANK plugin (build/spank/gpuslice.so) and the Slurm
# Prolog/Epilog programs (build/bin/gpuslice-prolog, gpuslice-epilog).
SPANK_DIR    := $(BUILD)/spank
SPANK_SO     := $(SPANK_DIR)/gpuslice.so
SPANK_SRCS   := $(wildcard spank/*.c)
SPANK_HDRS   := $(wildcard spank/*.h)
SPANK_MAP    := spank/gpuslice.map
SPANK_CFLAGS := $(CFLAGS_COMMON) -fvisibility=hidden
SPANK_LDFLAGS:= $(LDFLAGS_COMMON) -shared -Wl,--version-script=$(SPANK_MAP)
PROLOG_BINS  := $(BIN)/gpuslice-prolog $(BIN)/gpuslice-epilog
PROLOG_GO    := $(shell find prolog cmd/gpuslice-prolog cmd/gpuslice-epilog internal daemon -name '*.go' ! -name '*_test.go' 2>/dev/null) go.mod
PROLOG_LDFLAGS := -ldflags "$(GO_HARDEN_LDFLAGS) -X github.com/gpuslice/gpuslice/internal/version.Version=$(VERSION)"

.PHONY: spank test-slurm
spank: $(SPANK_SO) $(PROLOG_BINS) ## build the SPANK plugin and the Slurm Prolog/Epilog

$(SPANK_SO): $(SPANK_SRCS) $(SPANK_HDRS) $(SPANK_MAP) /usr/include/slurm/spank.h
	@mkdir -p $(@D)
	$(CC) $(SPANK_CFLAGS) $(SPANK_LDFLAGS) -o $@ $(SPANK_SRCS)

$(BIN)/gpuslice-prolog $(BIN)/gpuslice-epilog: $(BIN)/gpuslice-%: $(PROLOG_GO)
	@mkdir -p $(@D)
	$(GO) build $(GO_BUILDFLAGS) $(PROLOG_LDFLAGS) -o $@ ./cmd/gpuslice-$*

# The Prolog/Epilog tests run a real gpusliced (fakecuda's NVML); the
# job_submit.lua tests run its pure functions with lua5.1 (the Lua Slurm
# 22.05 links); the end-to-end suite (two slurmd hosts in network, UTS,
# mount and cgroup namespaces, tracking jobs with cgroup v2; then a few
# scenarios again on a cluster without cgroups) needs every component and
# root (it skips otherwise).
# libv2view.so: preloaded into the test cluster's slurmd on a host that
# mounts cgroup v1 hierarchies beside cgroup v2 (tests/slurm/v2view).
$(SLURM_V2VIEW): tests/slurm/v2view/v2view.c
	@mkdir -p $(@D)
	$(CC) -O2 -g $(CWARN) -D_GNU_SOURCE -fPIC -shared -o $@ $<

test-slurm: $(SLURM_TEST_DEPS) ## Prolog/Epilog, plugin and job_submit.lua unit tests; two-node end-to-end suite on a real Slurm (root)
	@$(MAKE) --no-print-directory run-slurm-22.05

# The tests alone, once everything they need is built.
.PHONY: run-slurm-22.05
run-slurm-22.05:
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 5m ./prolog/... ./spank/...
	lua5.1 tests/slurm/lua/job_submit_test.lua etc/slurm/job_submit.lua
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 35m ./tests/slurm/...
	GPUSLICE_SLURM_TRACKING=linuxproc GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 10m \
		-run '$(SLURM_LINUXPROC_TESTS)' ./tests/slurm/...
	GPUSLICE_SLURM_ACCOUNTING=0 GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 5m \
		-run '$(SLURM_NOACCOUNTING_TESTS)' ./tests/slurm/...
	GPUSLICE_SLURM_QUAD=1 GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 10m \
		-run '$(SLURM_QUAD_TESTS)' ./tests/slurm/...

# The cluster without slurmdbd, for sites that keep no accounting: the
# Epilog, installed without flags, finds out and returns at once (every
# other cluster of the suites has slurmdbd).
SLURM_NOACCOUNTING_TESTS := TestEpilogWithoutAccountingReturnsAtOnce

# The cluster with a third node of four GPUs (tn3): a job of one whole GPU
# beside shares of the others (tests/slurm/wholegpu_test.go); also on
# 24.11 and 26.05 (mk/trixie.mk, mk/slurm-src.mk).
SLURM_QUAD_TESTS := TestWholeGPUBesideShares|TestSshAdopt

# The cluster without cgroups (proctrack/linuxproc, task/none), for sites
# that have none: the quota, the escapes the environment allows, and the
# one linuxproc leaves open (tests/slurm/tracking_test.go).
SLURM_LINUXPROC_TESTS := TestSrunQuota|TestSbatchSharedQuota|TestEnvBypassUnderSlurm|TestUnpreloadedTaskAuditedUnderSlurm|TestDoubleForkEscape

# ---- The plugin for Slurm 24.11 (Debian 13) -----------------------------------
# Built with this machine's gcc and C library against the Debian 13 root's
# Slurm 24.11 headers (mk/trixie.mk), linked into build/spank-24.11/include/
# slurm, which comes before /usr/include (Debian 12's 22.05) on the command
# line, as for SchedMD's releases below; the build fails when the headers
# name another release. Built inside the root with its gcc, the plugin
# needed the root's glibc 2.38 (C23's strtol), so the packages could not
# load it on EL 9, Debian 12 or Ubuntu 24.04 running 24.11. spank/compat.h
# holds what differs between releases. slurm-version next to each plugin
# records the SLURM_VERSION_NUMBER it was built for (the packages' Depends
# come from it). When the Debian archive was unreachable (build/trixie/
# UNREACHABLE) nothing is built and a warning says why.
SPANK24_DIR  := $(BUILD)/spank-24.11
SPANK24_SO   := $(SPANK24_DIR)/gpuslice.so
SLURM_VERSION_CMD := sed -n 's/^\#define SLURM_VERSION_NUMBER[[:space:]]*//p'

.PHONY: spank-24.11
spank-24.11: $(TRIXIE_STAMP) $(SPANK_DIR)/slurm-version ## build the SPANK plugin for Slurm 24.11 in the Debian 13 root (build/spank-24.11)
	@if [ -e $(TRIXIE)/UNREACHABLE ]; then \
	  echo "spank-24.11: not built: $$(cat $(TRIXIE)/UNREACHABLE)" >&2; \
	else $(MAKE) --no-print-directory $(SPANK24_SO); fi

$(SPANK_DIR)/slurm-version: $(SPANK_SO)
	$(SLURM_VERSION_CMD) /usr/include/slurm/slurm_version.h >$@

$(SPANK24_SO): $(SPANK_SRCS) $(SPANK_HDRS) $(SPANK_MAP) $(TRIXIE_STAMP)
	@mkdir -p $(@D)/include
	ln -sfn $(TRIXIE_ROOT)/usr/include/slurm $(@D)/include/slurm
	$(CC) $(SPANK_CFLAGS) -I$(@D)/include $(SPANK_LDFLAGS) -o $@ $(SPANK_SRCS)
	@v=$$($(SLURM_VERSION_CMD) $(@D)/include/slurm/slurm_version.h); \
	 [ "$$(printf '%d.%02d' $$((v >> 16)) $$(((v >> 8) & 255)))" = "24.11" ] || \
	   { echo "$@: built against Slurm $$v, not 24.11" >&2; rm -f $@; exit 1; }; \
	 echo $$v >$(@D)/slurm-version

# ---- The plugin for SchedMD's releases (make slurm-src) -------------------------
# Built with this machine's gcc against each release's installed headers
# (build/slurm/RELEASE/include, mk/slurm-src.mk), which come before
# /usr/include (Debian's 22.05) on the command line: build/spank/RELEASE/
# gpuslice.so and slurm-version, checked to name RELEASE. When the
# release's source was not found (build/slurm/RELEASE/UNAVAILABLE) nothing
# is built and a warning says why. make spank-releases builds the plugin
# for every release: 22.05, 24.11 and these.
.PHONY: spank-releases
spank-releases: spank spank-24.11 $(SLURM_SRC_RELEASES:%=spank-%) ## build the SPANK plugin for every supported Slurm release (make spank-RELEASE: one, e.g. spank-25.05 in build/spank/25.05)

define spank_release
.PHONY: spank-$(1)
spank-$(1): slurm-src-$(1)
	@if [ -e $(SLURM_SRC)/$(1)/UNAVAILABLE ]; then \
	  echo "spank-$(1): not built: $$$$(cat $(SLURM_SRC)/$(1)/UNAVAILABLE)" >&2; \
	else $(MAKE) --no-print-directory $(SPANK_DIR)/$(1)/gpuslice.so; fi
endef
$(foreach r,$(SLURM_SRC_RELEASES),$(eval $(call spank_release,$(r))))

$(SPANK_DIR)/%/gpuslice.so: $(SPANK_SRCS) $(SPANK_HDRS) $(SPANK_MAP) $(SLURM_SRC)/%/.stamp
	@mkdir -p $(@D)
	$(CC) $(SPANK_CFLAGS) -I$(SLURM_SRC)/$*/include $(SPANK_LDFLAGS) -o $@ $(SPANK_SRCS)
	@v=$$($(SLURM_VERSION_CMD) $(SLURM_SRC)/$*/include/slurm/slurm_version.h); \
	 [ "$$(printf '%d.%02d' $$((v >> 16)) $$(((v >> 8) & 255)))" = "$*" ] || \
	   { echo "$@: built against Slurm $$v, not $*" >&2; rm -f $@; exit 1; }; \
	 echo $$v >$(@D)/slurm-version
