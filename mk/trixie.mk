# trixie: a Debian 13 root (build/trixie/root) with Slurm 24.11, munge, Lua
# and a C toolchain, made by debootstrap from deb.debian.org. The 24.11 SPANK
# plugin is built against its headers, the Slurm 24.11 suite runs its daemons
# inside it, the package test installs the Debian 13 .deb into it.
#
# A finished root is kept as a tarball in TRIXIE_CACHE (default in
# GPUSLICE_CACHE, kept across clones and `make clean`). The tarball is keyed
# by the suite, the mirror, the package list and scripts/trixie-root.sh's
# LAYOUT: a change to any builds afresh.
#
# When the archive cannot be reached the target still succeeds but writes
# build/trixie/UNREACHABLE with debootstrap's message (and tries again next
# time); what needs the root skips with that message. Needs root
# (debootstrap, chroot, mounts).
TRIXIE        := $(BUILD)/trixie
TRIXIE_ROOT   := $(TRIXIE)/root
TRIXIE_CACHE  ?= $(GPUSLICE_CACHE)/trixie
TRIXIE_STAMP  := $(TRIXIE)/.stamp
# Slurm 24.11's job_submit_lua.so links liblua5.1 in Debian 13, as in 12.
# The end-to-end suite on 24.11 (make test-slurm-24.11) also needs iproute2
# (the test hosts' network namespaces), slurmdbd and a database server for
# its accounting (mariadb-server), and the gpu/nvml plugin, which
# scripts/trixie-root.sh unpacks from contrib.
TRIXIE_PKGS   := slurmctld slurmd slurm-client libslurm-dev slurm-wlm-basic-plugins munge \
                 lua5.1 gcc make libc6-dev procps iproute2 slurmdbd mariadb-server
TRIXIE_RUN    := $(ROOT)/scripts/trixie-root.sh run $(TRIXIE_ROOT)

.PHONY: trixie-root trixie-clean
trixie-root: $(TRIXIE_STAMP) ## Debian 13 root with Slurm 24.11 in build/trixie/root (debootstrap; cached in TRIXIE_CACHE)

$(TRIXIE_STAMP): mk/trixie.mk scripts/trixie-root.sh $(TREE_CACHE) $(DEBOOTSTRAP)
	@rm -f $@ $(TRIXIE)/UNREACHABLE
	@mkdir -p $(TRIXIE)
	$(call unless_unreachable,$(ROOT)/scripts/trixie-root.sh build $(TRIXIE_ROOT) $(TRIXIE_CACHE) $(TRIXIE_PKGS),trixie-root: archive unreachable; what needs Debian 13 will skip)
	@[ -e $(TRIXIE)/UNREACHABLE ] || touch $@

trixie-clean: ## remove the Debian 13 root (the cache in TRIXIE_CACHE stays)
	rm -rf $(TRIXIE)

# bookworm: a Debian 12 root (build/bookworm/root) with Debian 12's Slurm
# 22.05 and munge, made the same way, in which the package tests follow
# docs/install.md's Debian path as written (tests/packaging/installpath_test.go),
# as they do in the Debian 13 root, and its path for a Slurm built from
# source with SchedMD's releases (built on this Debian 12 machine; their
# job_submit/lua links Lua 5.4): this machine's own /etc/slurm is left
# alone. Cached in BOOKWORM_CACHE; skipped, with the reason, when the
# archive cannot be reached.
BOOKWORM       := $(BUILD)/bookworm
BOOKWORM_ROOT  := $(BOOKWORM)/root
BOOKWORM_CACHE ?= $(GPUSLICE_CACHE)/bookworm
BOOKWORM_STAMP := $(BOOKWORM)/.stamp
BOOKWORM_PKGS  := slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge lua5.1 liblua5.4-0 procps

.PHONY: bookworm-root
bookworm-root: $(BOOKWORM_STAMP) ## Debian 12 root with Slurm 22.05 in build/bookworm/root (debootstrap; cached in BOOKWORM_CACHE)

$(BOOKWORM_STAMP): mk/trixie.mk scripts/trixie-root.sh $(TREE_CACHE) $(DEBOOTSTRAP)
	@rm -f $@ $(BOOKWORM)/UNREACHABLE
	@mkdir -p $(BOOKWORM)
	$(call unless_unreachable,TRIXIE_SUITE=bookworm $(ROOT)/scripts/trixie-root.sh build $(BOOKWORM_ROOT) $(BOOKWORM_CACHE) $(BOOKWORM_PKGS),bookworm-root: archive unreachable; the Debian 12 root's tests will skip)
	@[ -e $(BOOKWORM)/UNREACHABLE ] || touch $@

# The end-to-end suite (tests/slurm: two slurmd hosts in network namespaces,
# every scenario of make test-slurm) on Slurm 24.11: the test binary runs
# itself in the root with the plugin built for 24.11 (the one built for
# 22.05, make spank, is there to be refused by 24.11's srun); its hosts are
# on gs13br0, 10.78.0.0/24 (make test-slurm's are on gs8br0, 10.77.0.0/24),
# so the two may run at once. Needs root; skips when the archive is
# unreachable.
.PHONY: test-slurm-24.11
test-slurm-24.11: trixie-root spank-24.11 $(SLURM_TEST_DEPS) ## the end-to-end suite on Slurm 24.11 in the Debian 13 root (root)
	@$(MAKE) --no-print-directory run-slurm-24.11

.PHONY: run-slurm-24.11
run-slurm-24.11:
	GPUSLICE_SLURM_RELEASE=24.11 GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 35m ./tests/slurm/
	GPUSLICE_SLURM_QUAD=1 GPUSLICE_SLURM_RELEASE=24.11 GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 10m \
		-run '$(SLURM_QUAD_TESTS)' ./tests/slurm/

# Every release (what `make test` runs), in three lanes at once, each a
# full suite then core subsets, balanced by what each takes (the suites
# mostly wait on Slurm): 22.05's full suite, then 24.05's and 25.05's core
# subsets; 24.11's, then 23.11's; 26.05's, then 25.11's (the full suite on
# 26.05, the core subsets on the others: mk/slurm-src.mk). Each run has
# its own hosts, bridge, subnet, lock and /tmp prefix. With a fourth Slurm
# lane (26.05 apart), slurmctld on 24.11 answered an RPC too late now and
# then on 2 cores ("Socket timed out on send/recv operation"). Each lane's
# output goes to build/test-logs/ and is printed whole when it ends.
SLURM_LANES := run-lane-22.05 run-lane-24.11 run-lane-26.05
LANE_22.05 := 22.05 24.05 25.05
LANE_24.11 := 24.11 23.11
LANE_26.05 := 26.05 25.11
.PHONY: $(SLURM_LANES)
$(SLURM_LANES): run-lane-%:
	@rc=0; for r in $(LANE_$*); do start=$$(date +%s); \
	  $(MAKE) --no-print-directory run-slurm-$$r || rc=1; \
	  echo "$@: Slurm $$r: $$(( $$(date +%s) - start )) s"; done; exit $$rc

.PHONY: test-slurm-all
test-slurm-all: trixie-root spank-releases $(SLURM_TEST_DEPS) ## the end-to-end suite on every Slurm release, three lanes at once (root)
	@MAKE='$(MAKE)' bash scripts/run-together.sh $(BUILD)/test-logs $(SLURM_LANES)

# What make test runs: the three lanes of test-slurm-all, the GPU time
# share (test-compute, mk/go.mk) and the packages (test-packages,
# mk/packaging.mk) at once. The compute cases wait on modelled GPU time and
# load the CPUs little; the package tests build and install for about 2.5
# minutes, while the Slurm lanes mostly wait. Each alone after the lanes
# added about 5.5 and 3 minutes to make test.
.PHONY: test-long
test-long: trixie-root bookworm-root nvidia-debs spank-releases $(SLURM_TEST_DEPS) go-build fakecuda interceptor packages old-glibc ## test-slurm-all, test-compute and test-packages at once, five lanes (what make test runs; root)
	@MAKE='$(MAKE)' bash scripts/run-together.sh $(BUILD)/test-logs $(SLURM_LANES) run-compute run-packages
