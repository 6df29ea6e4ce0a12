# Go components owned here: gpusliced, the gpuslice CLI, internal packages,
# their tests (vet, unit + integration, fuzz seed corpus, metrics lint) and
# the benchmark harness.
.PHONY: go-build test-go bench readme-bench

GO_PKG      := github.com/gpuslice/gpuslice
GO_LDFLAGS  := -X $(GO_PKG)/internal/version.Version=$(VERSION)
# gpusliced binds NVML lazily (go-nvml resolves it with dlopen at run time, and
# its cgo stubs name symbols older drivers lack), so it cannot use -bindnow.
# Everything the Go binaries are built from (any change rebuilds them).
GO_SRCS     := $(shell find $(ROOT)/cmd $(ROOT)/daemon $(ROOT)/internal $(ROOT)/cli $(ROOT)/bench \
                 -name '*.go' -not -name '*_test.go' 2>/dev/null) $(ROOT)/go.mod $(ROOT)/go.sum
GO_STAMP    := $(BUILD)/obj/go/version
# Packages tested by test-go.
GO_TEST_PKGS := ./internal/... ./daemon/... ./cli/... ./cmd/gpusliced/... ./cmd/gpuslice/... ./bench/...
BENCH_BIN   := $(BUILD)/obj/go/gpuslice-bench

go-build: $(BIN)/gpusliced $(BIN)/gpuslice ## build gpusliced and the gpuslice CLI

# Rebuild when VERSION changes: the stamp file holds the last one.
$(GO_STAMP): go-force
	@mkdir -p $(@D)
	@[ "$$(cat $@ 2>/dev/null)" = "$(VERSION)" ] || echo "$(VERSION)" > $@

$(BIN)/gpusliced: $(GO_SRCS) $(GO_STAMP)
	@mkdir -p $(@D)
	$(GO) build $(GO_BUILDFLAGS) -ldflags "$(GO_LDFLAGS)" -o $@ ./cmd/gpusliced

$(BIN)/gpuslice: $(GO_SRCS) $(GO_STAMP)
	@mkdir -p $(@D)
	$(GO) build $(GO_BUILDFLAGS) -ldflags "$(GO_HARDEN_LDFLAGS) $(GO_LDFLAGS)" -o $@ ./cmd/gpuslice

$(BENCH_BIN): $(GO_SRCS) $(GO_STAMP)
	@mkdir -p $(@D)
	$(GO) build $(GO_BUILDFLAGS) -ldflags "$(GO_LDFLAGS)" -o $@ ./bench/cmd/gpuslice-bench

# Integration tests in these packages start the built gpusliced against
# fakecuda's NVML, hence the build prerequisites. Plain `go test` runs the
# committed fuzz seed corpus (testdata/fuzz) as ordinary tests.
test-go: go-build fakecuda interceptor ## go vet + Go unit/integration tests, fuzz seeds, metrics lint
	$(GO) vet ./...
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 10m $(GO_TEST_PKGS)

bench: fakecuda interceptor go-build $(BIN)/gpuslice-epilog $(BENCH_BIN) ## run the benchmarks: bench/results.json + summary against DESIGN.md targets
	$(BENCH_BIN) -build $(BUILD) -out $(ROOT)/bench/results.json
	$(BENCH_BIN) -out $(ROOT)/bench/results.json -readme $(ROOT)/README.md

readme-bench: $(BENCH_BIN) ## rewrite README's performance table from bench/results.json
	$(BENCH_BIN) -out $(ROOT)/bench/results.json -readme $(ROOT)/README.md

.PHONY: go-force
go-force:

# The GPU time share end to end (tests/compute): real gpusliced, the
# interceptor's launch gate and fakecuda's time-sliced GPU; about 6 minutes
# (shares measured over 10 to 30 s windows of modelled GPU time, each case
# with a daemon of its own: multi-process jobs, jobs going around the gate
# and frozen, thawed when they end or gpusliced stops).
.PHONY: test-compute
test-compute: go-build fakecuda interceptor ## GPU time share: shares vs weights whatever the processes, caps, giant kernels, killed jobs, bypasses frozen
	@$(MAKE) --no-print-directory run-compute
# The tests alone, once everything they need is built (a lane of make
# test-long, mk/trixie.mk).
.PHONY: run-compute
run-compute:
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 15m ./tests/compute/...
