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
PROLOG_GO    := $(shell find prolog cmd/gpuslice-prolog cmd/gpuslice-epilog internal daemon/config -name '*.go' ! -name '*_test.go' 2>/dev/null) go.mod
PROLOG_LDFLAGS := -ldflags "-X github.com/gpuslice/gpuslice/internal/version.Version=$(VERSION)"

.PHONY: spank test-slurm
spank: $(SPANK_SO) $(PROLOG_BINS) ## build the SPANK plugin and the Slurm Prolog/Epilog

$(SPANK_SO): $(SPANK_SRCS) $(SPANK_HDRS) $(SPANK_MAP) /usr/include/slurm/spank.h
	@mkdir -p $(@D)
	$(CC) $(SPANK_CFLAGS) $(SPANK_LDFLAGS) -o $@ $(SPANK_SRCS)

$(BIN)/gpuslice-prolog $(BIN)/gpuslice-epilog: $(BIN)/gpuslice-%: $(PROLOG_GO)
	@mkdir -p $(@D)
	$(GO) build $(PROLOG_LDFLAGS) -o $@ ./cmd/gpuslice-$*

test-slurm: ## unit tests of the Prolog/Epilog and the plugin's size parser; end-to-end suite on a real Slurm (root)
	$(GO) test -count=1 ./prolog/... ./spank/...
	$(GO) test -count=1 -timeout 20m ./tests/slurm/...
