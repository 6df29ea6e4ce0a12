# make soak: hours under faults (issue 60). A cluster of four nodes of two
# fake GPUs each, with slurmdbd and MariaDB and cgroup v2, runs a seeded
# schedule of two honest users' jobs, a hostile user's attacks and faults
# (daemons killed and restarted, slurmdbd away, job processes killed,
# gpusliced's state filesystem full, a node rebooted) for DURATION, its
# invariants checked every second and at the end (tests/slurm/soak_*.go,
# docs/reliability.md). The same SEED replays the same jobs and faults.
# The report (one line per invariant, its checks and violations) is
# written to SOAK_REPORT, the run's log beside it. Its hosts are on gskbr0,
# 10.86.0.0/24, so it runs beside the suite's lanes. Needs root.
DURATION     ?= 10m
SEED         ?= 1
RELEASE      ?= 22.05
SOAK_REPORT  ?= $(BUILD)/soak/report-$(RELEASE)-seed$(SEED)-$(DURATION).txt
# go test's bound: the run, the wait for its last jobs (15 min at most) and
# for their figures in accounting (4 min), the cluster's start and stop
SOAK_TIMEOUT ?= 4h

.PHONY: soak run-soak
soak: $(SLURM_TEST_DEPS) $(if $(filter-out 22.05,$(RELEASE)),trixie-root spank-releases) ## seeded soak under faults: DURATION=10m SEED=1 RELEASE=22.05 (root; report in build/soak/)
	@$(MAKE) --no-print-directory run-soak

run-soak:
	@mkdir -p $(dir $(SOAK_REPORT))
	GPUSLICE_SOAK_DURATION=$(DURATION) GPUSLICE_SOAK_SEED=$(SEED) GPUSLICE_SOAK_REPORT=$(SOAK_REPORT) \
	GPUSLICE_SLURM_RELEASE=$(RELEASE) GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout $(SOAK_TIMEOUT) \
		-run '^TestSoak$$' -v ./tests/slurm/

# What CI runs: a 10-minute seed. It is not a lane of make test's
# test-long: beside the suite's four lanes on a machine of 2 cores (their
# comment in mk/trixie.mk: a fourth lane already made slurmctld answer
# late now and then), a fifth cluster of four nodes and its faults could
# not be shown not to make them flaky (docs/reliability.md).
SOAK_CI_SEED ?= 60
.PHONY: soak-ci
soak-ci: $(SLURM_TEST_DEPS) ## the soak's 10-minute seed, as CI runs it (root)
	@$(MAKE) --no-print-directory run-soak DURATION=10m SEED=$(SOAK_CI_SEED) SOAK_TIMEOUT=45m
