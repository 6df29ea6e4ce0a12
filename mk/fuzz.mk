# Fuzzing beyond the seeds. Plain `go test` (test-go, test-interceptor,
# test-slurm) runs each fuzz target's seeds and its corpus in testdata/fuzz
# as ordinary tests; these run the fuzzer itself, one target at a time (go
# test -fuzz takes one package and one target), for a bounded time each.
# An input that fails is written to the target's testdata/fuzz/<Name>/,
# where it stays as a regression once the fault is fixed.
.PHONY: fuzz test-fuzz run-fuzz

# Every fuzz target of the tree (`grep -rn '^func Fuzz'`), as
# package:Name:executions, the executions about 10 s of fuzzing each on a
# 2-core machine. The budgets are counts, not durations: a -fuzztime
# duration races the fuzzing coordinator's deadline against its workers
# (Go before 1.27, go.dev/issue/75804) and fails a target with "context
# deadline exceeded" and no failing input when the machine is loaded, as
# FuzzAttachReply (a process per input) did beside make test's lanes.
FUZZ_TARGETS := ./internal/ipc:FuzzFrame:400000 ./tests/interceptor:FuzzAttachReply:1000 \
                ./spank/spanktest:FuzzSummary:300000 ./spank/spanktest:FuzzParse:250000
# make fuzz runs each target FUZZ_TIMES times its budget (make test once),
# or for FUZZTIME when given (a duration or a count: 2m, 10000x); make
# test's run also fails a target that runs past 5 minutes (stuck).
FUZZ_TIMES    ?= 3
FUZZTIME      ?=
FUZZ_TIMEOUT  ?= 0
# FuzzAttachReply runs a process per input (the interceptor against a fake peer).
FUZZ_DEPS     := fakecuda-libs interceptor interceptor-tests

fuzz: $(FUZZ_DEPS) ## fuzz every target beyond its seeds, one after the other (FUZZ_TIMES=3 times make test's budget each, or FUZZTIME=)
	@$(MAKE) --no-print-directory run-fuzz FUZZ_TIMES=$(FUZZ_TIMES)

test-fuzz: $(FUZZ_DEPS) ## every fuzz target for about 10 s beyond its seeds (a count of executions each; part of make test)
	@$(MAKE) --no-print-directory run-fuzz FUZZ_TIMES=1 FUZZTIME= FUZZ_TIMEOUT=5m

run-fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest#*:}; \
		budget=$(FUZZTIME); [ -n "$$budget" ] || budget=$$((n * $(FUZZ_TIMES)))x; \
		echo "fuzz: $$name ($$pkg) for $$budget"; \
		GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout $(FUZZ_TIMEOUT) -run '^$$' \
			-fuzz "^$$name$$" -fuzztime $$budget $$pkg; \
	done
