# The real-GPU suite (tests/gpu, tests/gpu/README.md): one folder,
# build/gpu-bundle, holds everything a machine with NVIDIA's driver and no
# Go needs to run it (stripped gpusliced and gpuslice, libgpuslice.so, the
# context probe, C probes compiled here, the Python cases, run.sh, and the
# static-runtime probe's source, built there against NVIDIA's
# libcudart_static.a where the machine has one);
# `make test-gpu` runs the same bundle here on fakecuda, and
# `make real-gpu-report` turns a real GPU's results into docs/real-gpu.md.
.PHONY: gpu-bundle test-gpu real-gpu-report

GPU_BUNDLE     := $(BUILD)/gpu-bundle
GPU_RESULTS    := $(BUILD)/gpu
GPU_BUNDLE_MAX := 41943040
RESULTS        ?= $(GPU_RESULTS)/results.jsonl

# The probes: gs_probe (driver-API steps) and three example programs. They
# are built without a runpath to build/lib and with lazy binding: on the
# GPU machine libcuda.so.1 and libnvidia-ml.so.1 are the driver's, found on
# the default library path, and an entry point that driver lacks fails only
# the step that calls it, not the whole probe at load. libcudart.so.12 in
# the bundle's lib/ is fakecuda's runtime, which alloc_bench needs to load
# (it measures through the driver API only); static_runtime carries
# fakecuda's static runtime, which reaches whatever driver is loaded
# through cuGetProcAddress_v2, as NVIDIA's does.
GPU_PROBES := gs_probe alloc_bench dlopen_driver static_runtime
GPU_PROBE_BINS := $(addprefix $(GPU_BUNDLE)/probes/,$(GPU_PROBES))
GPU_PROBE_CFLAGS := $(CFLAGS_COMMON) -std=gnu11 -Inative/include -Inative/examples
GPU_PROBE_LINK := -Wl,-z,relro -Wl,-z,lazy -pthread -L$(LIB) -Wl,-rpath,'$$ORIGIN/../lib'
GPU_LIBS_gs_probe       := -lcuda -lnvidia-ml -ldl
GPU_LIBS_alloc_bench    := -lcudart -lcuda
GPU_LIBS_dlopen_driver  := -ldl
GPU_LIBS_static_runtime := -Wl,-Bstatic -lcudart_static -Wl,-Bdynamic -ldl
GPU_SRC_gs_probe        := native/interceptor/tests/gs_probe.c
GPU_SRC_alloc_bench     := native/examples/alloc_bench.c
GPU_SRC_dlopen_driver   := native/examples/dlopen_driver.c
GPU_SRC_static_runtime  := native/examples/static_runtime.c

define GPU_PROBE_RULE
$(GPU_BUNDLE)/probes/$(1): $(GPU_SRC_$(1)) $(wildcard native/include/*.h native/examples/*.h) | fakecuda-libs
	@mkdir -p $$(@D)
	$$(CC) $$(GPU_PROBE_CFLAGS) -o $$@ $$< $$(GPU_PROBE_LINK) $$(GPU_LIBS_$(1))
endef
$(foreach p,$(GPU_PROBES),$(eval $(call GPU_PROBE_RULE,$(p))))

$(GPU_BUNDLE)/bin/%: $(BIN)/%
	@mkdir -p $(@D)
	strip --strip-all -o $@ $<

$(GPU_BUNDLE)/lib/%: $(LIB)/%
	@mkdir -p $(@D)
	cp $< $@

GPU_BUNDLE_FILES := $(GPU_PROBE_BINS) \
	$(addprefix $(GPU_BUNDLE)/bin/,gpusliced gpuslice gpuslice-ctxprobe) \
	$(addprefix $(GPU_BUNDLE)/lib/,libgpuslice.so libcudart.so.12)

gpu-bundle: go-build ctxprobe interceptor fakecuda-libs ## build build/gpu-bundle: what a GPU machine without Go needs to run tests/gpu (<= 40 MiB)
	@$(MAKE) --no-print-directory $(GPU_BUNDLE_FILES)
	@rm -rf $(GPU_BUNDLE)/cases && mkdir -p $(GPU_BUNDLE)/cases
	@cp tests/gpu/run.sh tests/gpu/*.py tests/gpu/README.md $(GPU_BUNDLE)/
	@cp tests/gpu/cases/*.py $(GPU_BUNDLE)/cases/
	@rm -rf $(GPU_BUNDLE)/src && mkdir -p $(GPU_BUNDLE)/src/include
	@cp native/examples/static_runtime.c native/examples/common.h $(GPU_BUNDLE)/src/
	@cp native/include/*.h $(GPU_BUNDLE)/src/include/
	@chmod 755 $(GPU_BUNDLE)/run.sh
	@echo "$(VERSION)" > $(GPU_BUNDLE)/VERSION
	@size=$$(du -sb $(GPU_BUNDLE) | cut -f1); \
	if [ $$size -gt $(GPU_BUNDLE_MAX) ]; then \
	  echo "gpu-bundle: $(GPU_BUNDLE) is $$size bytes, over the 40 MiB a device run may carry" >&2; exit 1; fi; \
	echo "gpu-bundle: $(GPU_BUNDLE) ($$(( size / 1048576 )) MiB)"

# On fakecuda; the results go beside, never to $(RESULTS), which is for a
# real GPU's run.
# rest_check.sh: what a budget cuts, run.sh --rest runs.
test-gpu: gpu-bundle ## run the real-GPU suite (tests/gpu) here on fakecuda
	@mkdir -p $(GPU_RESULTS)
	bash $(GPU_BUNDLE)/run.sh --fakecuda $(LIB) $(GPU_RESULTS)/fakecuda.jsonl
	bash tests/gpu/rest_check.sh $(GPU_BUNDLE) $(LIB) $(GPU_RESULTS)

# RESULTS may name several runs of one build on one GPU, in order (the
# second from run.sh --rest): a later run's line for a case replaces the
# earlier one's.
real-gpu-report: ## write docs/real-gpu.md from a real GPU's results (RESULTS=, default build/gpu/results.jsonl; several: runs in order)
	$(GO) run ./cmd/realgpudoc -o docs/real-gpu.md $(RESULTS)
