# Fuzzing beyond the seeds. Plain `go test` (test-go, test-interceptor,
# test-slurm) runs each fuzz target's seeds and its corpus in testdata/fuzz
# as ordinary tests; these run the fuzzer itself, one target at a time (go
# test -fuzz takes one package and one target), for a bounded time each.
# An input that fails is written to the target's testdata/fuzz/<Name>/,
# where it stays as a regression once the fault is fixed.
.PHONY: fuzz test-fuzz run-fuzz

# Every fuzz target of the tree (`grep -rn '^func Fuzz'`), as package:Name.
FUZZ_TARGETS := ./internal/ipc:FuzzFrame ./tests/interceptor:FuzzAttachReply \
                ./spank/spanktest:FuzzSummary ./spank/spanktest:FuzzParse
# How long each target is fuzzed by make fuzz, and by make test; make
# test's run also fails a target that runs past 5 minutes (stuck).
FUZZTIME      ?= 30s
FUZZTIME_TEST := 10s
FUZZ_TIMEOUT  ?= 0
# FuzzAttachReply runs a process per input (the interceptor against a fake peer).
FUZZ_DEPS     := fakecuda-libs interceptor interceptor-tests

fuzz: $(FUZZ_DEPS) ## fuzz every target beyond its seeds, one after the other (FUZZTIME=30s each)
	@$(MAKE) --no-print-directory run-fuzz FUZZTIME=$(FUZZTIME)

test-fuzz: $(FUZZ_DEPS) ## every fuzz target for 10 s beyond its seeds (part of make test)
	@$(MAKE) --no-print-directory run-fuzz FUZZTIME=$(FUZZTIME_TEST) FUZZ_TIMEOUT=5m

run-fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $${t#*:} ($${t%%:*}) for $(FUZZTIME)"; \
		GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout $(FUZZ_TIMEOUT) -run '^$$' \
			-fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) $${t%%:*}; \
	done
