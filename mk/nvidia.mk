# NVIDIA's real user-space binaries from Debian bookworm's contrib and non-free
# (CUDA runtime 11.8 and its headers, cuBLAS, nvidia-smi 535, pycuda, Slurm's
# NVML GPU plugin), fetched with a private apt configuration (own sources list,
# lists and cache under build/) and unpacked under build/nvidia/root by
# scripts/nvidia-debs.sh. Nothing is installed and the machine's apt sources
# are untouched. The real libcuda and NVML are never fetched: the programs
# run on fakecuda's libraries.
#
# When the archive cannot be reached the target still succeeds but writes
# build/nvidia/UNREACHABLE with apt's message; the tests that need these
# programs skip with that message.
NVIDIA        := $(BUILD)/nvidia
NVIDIA_ROOT   := $(NVIDIA)/root
NVIDIA_SUITE  := bookworm
# Packages unpacked whole.
NVIDIA_PKGS   := libcudart11.0 libcublas11 libcublaslt11 libcurand10 nvidia-smi slurm-wlm-nvml-plugin \
                 python3-pycuda python3-appdirs python3-decorator python3-mako python3-markupsafe \
                 libboost-python1.74.0 libboost-thread1.74.0
# Packages of which only the headers (usr/include) are kept.
NVIDIA_HDR_PKGS := nvidia-cuda-dev
# The unpacked root is kept in NVIDIA_CACHE (scripts/nvidia-debs.sh).
NVIDIA_CACHE  ?= $(GPUSLICE_CACHE)/nvidia

.PHONY: nvidia-debs nvidia-force
nvidia-debs: $(NVIDIA)/.stamp ## fetch NVIDIA's CUDA runtime, cuBLAS, nvidia-smi, pycuda from Debian contrib/non-free into build/nvidia

# Fetch again when the package selection changes (not on every edit of this file).
NVIDIA_SEL_STAMP := $(BUILD)/obj/nvidia/selection
NVIDIA_SELECTION := $(NVIDIA_SUITE) $(NVIDIA_PKGS) hdr: $(NVIDIA_HDR_PKGS)
$(NVIDIA_SEL_STAMP): nvidia-force
	@mkdir -p $(@D)
	@[ "$$(cat $@ 2>/dev/null)" = "$(NVIDIA_SELECTION)" ] || echo "$(NVIDIA_SELECTION)" > $@

$(NVIDIA)/.stamp: $(NVIDIA_SEL_STAMP) scripts/nvidia-debs.sh $(TREE_CACHE)
	@rm -rf $(NVIDIA)
	$(call unless_unreachable,$(ROOT)/scripts/nvidia-debs.sh $(NVIDIA) $(NVIDIA_CACHE) $(NVIDIA_SUITE) '$(NVIDIA_PKGS)' '$(NVIDIA_HDR_PKGS)',nvidia-debs: archive unreachable; tests that need NVIDIA's binaries will skip)
	@touch $@

# ---- programs built against NVIDIA's runtime, and their tests ----
# native/nvidia/*.c are compiled with gcc against NVIDIA's headers and linked
# to NVIDIA's libcudart.so.11.0 (and libcublas.so.11), with a runpath to
# build/nvidia/root; the driver they load is whatever libcuda.so.1 the
# loader finds: fakecuda's, through LD_LIBRARY_PATH=build/lib.
NV_TESTS   := $(BUILD)/tests/nvidia
NV_LIBDIR  := $(NVIDIA_ROOT)/usr/lib/x86_64-linux-gnu
NV_PROBES  := $(addprefix $(NV_TESTS)/,$(basename $(notdir $(wildcard native/nvidia/*.c))))
NV_CFLAGS  := -O2 -g $(CWARN) -std=gnu11 -D_GNU_SOURCE -isystem $(NVIDIA_ROOT)/usr/include
NV_LINK    := $(LDFLAGS_COMMON) -L$(NV_LIBDIR) -Wl,-rpath,'$$ORIGIN/../../nvidia/root/usr/lib/x86_64-linux-gnu'
NV_LIBS_cudart_probe := -l:libcudart.so.11.0
NV_LIBS_cublas_probe := -l:libcublas.so.11 -l:libcudart.so.11.0
NV_LIBS_procaddr_replay := -ldl

$(NV_TESTS)/%: native/nvidia/%.c $(NVIDIA)/.stamp
	@mkdir -p $(@D)
	$(CC) $(NV_CFLAGS) -o $@ $< $(NV_LINK) $(NV_LIBS_$*)

.PHONY: nvidia-probes test-nvidia-runtime
nvidia-probes: nvidia-debs ## build the programs linked to NVIDIA's CUDA runtime (build/tests/nvidia)
	@if [ -e $(NVIDIA)/UNREACHABLE ]; then echo "nvidia-probes: archive unreachable, not built"; \
	else $(MAKE) --no-print-directory $(NV_PROBES); fi

test-nvidia-runtime: nvidia-debs nvidia-probes fakecuda interceptor go-build ## NVIDIA's CUDA runtime 11.8 and cuBLAS on fakecuda, with and without a quota
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -run 'Runtime' ./tests/nvidia/...

# ---- real programs on fakecuda: nvidia-smi, pycuda, ffmpeg, slurmd -G ----
# Each test records one row per program in build/compat/tools.jsonl; `make
# compat` renders every build/compat/*.jsonl into docs/compatibility.md.
NVIDIA_TOOLS_TESTS := TestNvidiaSMI|TestPycuda|TestFFmpegCUDA|TestSlurmdAutoDetectNVML
COMPAT_DIR    := $(BUILD)/compat
# The suites whose results make compat renders (each writes $(COMPAT_DIR)/<suite>.jsonl).
COMPAT_SUITES := test-nvidia-runtime test-nvidia-tools

.PHONY: test-nvidia-tools compat
test-nvidia-tools: nvidia-debs fakecuda interceptor go-build ## run nvidia-smi, pycuda, ffmpeg and slurmd -G on fakecuda (tests/nvidia)
	@mkdir -p $(COMPAT_DIR) && rm -f $(COMPAT_DIR)/tools.jsonl
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -run '^($(NVIDIA_TOOLS_TESTS))$$' ./tests/nvidia/

compat: $(COMPAT_SUITES) ## run the real-program suites and regenerate docs/compatibility.md from their results
	$(GO) run ./cmd/compatdoc -o docs/compatibility.md $(sort $(wildcard $(COMPAT_DIR)/*.jsonl))
