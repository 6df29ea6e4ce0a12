# fakecuda: the stand-in CUDA driver (libcuda.so.1), runtime (libcudart.so.12,
# libcudart_static.a), NVML (libnvidia-ml.so.1), the example programs and the
# fakecuda test suite. The driver's exported surface, its version script and
# its cuGetProcAddress table are generated from native/fakecuda/entry-points.tsv.
.PHONY: fakecuda test-fakecuda fakecuda-libs fakecuda-examples fakecuda-tests

FC_DIR    := native/fakecuda
FC_EXDIR  := native/examples
FC_GEN    := $(BUILD)/gen/fakecuda
FC_OBJ    := $(BUILD)/obj/fakecuda
FC_TESTS  := $(BUILD)/tests/fakecuda
FC_CFLAGS := $(CFLAGS_COMMON) $(GLIBC_COMPAT_CFLAGS) -std=gnu11 -fvisibility=hidden -fno-ipa-icf -Inative/include -I$(FC_DIR) -I$(FC_GEN)
FC_HDRS   := $(wildcard native/include/*.h) $(wildcard $(FC_DIR)/*.h)
# -z nodelete: the libraries keep process-wide state (thread caches, atfork and
# thread-exit handlers, the mapped node state) that must outlive a dlclose.
FC_SOLINK := -shared $(LDFLAGS_COMMON) -Wl,--no-undefined -Wl,-Bsymbolic -Wl,-z,nodelete $(GLIBC_COMPAT_LIBS)

FC_COMMON   := config state procslot devnodes memlimit
FC_DRIVER   := init visible getproc ctx ctxattr alloc copy pool array vmm misc profiler graph ipcmem limcharge \
               exporttable ctxstorage integrity rtsupport modimage
FC_CUDART   := cudart
FC_NVML     := nvml nvml_procs nvml_export nvml_events nvml_device nvml_memlimit

FC_LIBS := $(LIB)/libcuda.so.1 $(LIB)/libcuda.so $(LIB)/libcudart.so.12 $(LIB)/libcudart.so \
           $(LIB)/libcudart_static.a $(LIB)/libnvidia-ml.so.1 $(LIB)/libnvidia-ml.so

FC_EXAMPLE_NAMES := target_app caching_allocator xla_prealloc expandable_segments alloc_storm static_runtime \
                    dlopen_driver async_pool nvml_query alloc_bench
FC_EXAMPLE_BINS  := $(addprefix $(EXAMPLES)/,$(FC_EXAMPLE_NAMES))
FC_TEST_NAMES    := $(basename $(notdir $(wildcard $(FC_DIR)/tests/*.c)))
FC_TEST_BINS     := $(addprefix $(FC_TESTS)/,$(FC_TEST_NAMES))

fakecuda: fakecuda-libs fakecuda-examples fakecuda-tests ## build fakecuda (libcuda, libcudart, NVML) and the examples

fakecuda-libs: $(FC_LIBS)
fakecuda-examples: $(FC_EXAMPLE_BINS)
fakecuda-tests: $(FC_TEST_BINS)

test-fakecuda: fakecuda ## run the fakecuda test suite
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 ./tests/fakecuda/...

# ---- generated driver surface ----
FC_ENTRY_POINTS := $(FC_DIR)/entry-points.tsv
$(FC_GEN)/.stamp: $(FC_ENTRY_POINTS) $(FC_DIR)/gen-entry-points.awk
	@mkdir -p $(FC_GEN)
	awk -v out=$(FC_GEN) -f $(FC_DIR)/gen-entry-points.awk $(FC_ENTRY_POINTS)
	LC_ALL=C sort -o $(FC_GEN)/exports.txt $(FC_GEN)/exports.txt
	@touch $@

$(FC_GEN)/stubs.c $(FC_GEN)/procaddr.c $(FC_GEN)/libcuda.map $(FC_GEN)/exports.txt: $(FC_GEN)/.stamp ;

$(FC_GEN)/.nvml-stamp: $(FC_DIR)/nvml-entry-points.txt $(FC_DIR)/gen-nvml.awk
	@mkdir -p $(FC_GEN)
	awk -v out=$(FC_GEN) -f $(FC_DIR)/gen-nvml.awk $(FC_DIR)/nvml-entry-points.txt
	@touch $@

$(FC_GEN)/nvml_stubs.c $(FC_GEN)/libnvidia-ml.map: $(FC_GEN)/.nvml-stamp ;

# ---- modelled GPU time: the timeline (both libraries), streams and events, NVML utilisation ----
FC_COMMON += timeline timeline_query
FC_DRIVER += stream
FC_NVML   += nvml_util

# ---- objects ----
$(FC_OBJ)/%.o: $(FC_DIR)/%.c $(FC_HDRS) $(FC_GEN)/.stamp $(FC_GEN)/.nvml-stamp
	@mkdir -p $(@D)
	$(CC) $(FC_CFLAGS) -c $< -o $@

$(FC_OBJ)/gen/%.o: $(FC_GEN)/%.c $(FC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(FC_CFLAGS) -c $< -o $@

# ---- libraries ----
FC_DRIVER_OBJS := $(addprefix $(FC_OBJ)/,$(addsuffix .o,$(FC_COMMON) $(FC_DRIVER))) \
                  $(FC_OBJ)/gen/procaddr.o $(FC_OBJ)/gen/stubs.o

$(LIB)/libcuda.so.1: $(FC_DRIVER_OBJS) $(FC_GEN)/libcuda.map
	@mkdir -p $(@D)
	$(CC) $(FC_SOLINK) -Wl,-soname,libcuda.so.1 -Wl,--version-script=$(FC_GEN)/libcuda.map -o $@ $(FC_DRIVER_OBJS)

$(LIB)/libcuda.so: $(LIB)/libcuda.so.1
	ln -sf libcuda.so.1 $@

FC_NVML_OBJS := $(addprefix $(FC_OBJ)/,$(addsuffix .o,$(FC_COMMON) $(FC_NVML))) $(FC_OBJ)/gen/nvml_stubs.o

$(LIB)/libnvidia-ml.so.1: $(FC_NVML_OBJS) $(FC_GEN)/libnvidia-ml.map
	@mkdir -p $(@D)
	$(CC) $(FC_SOLINK) -Wl,-soname,libnvidia-ml.so.1 -Wl,--version-script=$(FC_GEN)/libnvidia-ml.map -o $@ $(FC_NVML_OBJS)

$(LIB)/libnvidia-ml.so: $(LIB)/libnvidia-ml.so.1
	ln -sf libnvidia-ml.so.1 $@

FC_CUDART_OBJS := $(addprefix $(FC_OBJ)/,$(addsuffix .o,$(FC_CUDART)))

$(LIB)/libcudart.so.12: $(FC_CUDART_OBJS) $(FC_DIR)/libcudart.map
	@mkdir -p $(@D)
	$(CC) $(FC_SOLINK) -Wl,-soname,libcudart.so.12 -Wl,-rpath,'$$ORIGIN' -Wl,--version-script=$(FC_DIR)/libcudart.map -o $@ $(FC_CUDART_OBJS) -ldl

$(LIB)/libcudart.so: $(LIB)/libcudart.so.12
	ln -sf libcudart.so.12 $@

$(LIB)/libcudart_static.a: $(FC_CUDART_OBJS)
	@mkdir -p $(@D)
	rm -f $@
	ar rcs $@ $^

# ---- examples and test programs (rpath: build/lib) ----
FC_EXFLAGS := $(CFLAGS_COMMON) -std=gnu11 -Inative/include
FC_EXLINK  := $(LDFLAGS_COMMON) -L$(LIB) -Wl,-rpath,'$$ORIGIN/../lib'
FC_EXHDRS  := $(wildcard native/include/*.h) $(wildcard $(FC_EXDIR)/*.h)
FC_EXLIBS_target_app          := -lcudart -lcuda
FC_EXLIBS_caching_allocator   := -lcudart
FC_EXLIBS_xla_prealloc        := -lcuda
FC_EXLIBS_expandable_segments := -lcuda
FC_EXLIBS_alloc_storm         := -lcudart -lcuda
FC_EXLIBS_static_runtime      := -Wl,-Bstatic -lcudart_static -Wl,-Bdynamic -ldl
FC_EXLIBS_dlopen_driver       := -ldl
FC_EXLIBS_async_pool          := -lcuda
FC_EXLIBS_nvml_query          := -lnvidia-ml
FC_EXLIBS_alloc_bench         := -lcudart -lcuda -ldl

$(EXAMPLES)/%: $(FC_EXDIR)/%.c $(FC_EXHDRS) | $(FC_LIBS)
	@mkdir -p $(@D)
	$(CC) $(FC_EXFLAGS) -o $@ $< $(FC_EXLINK) $(FC_EXLIBS_$*)

$(FC_TESTS)/%: $(FC_DIR)/tests/%.c $(FC_EXHDRS) $(wildcard $(FC_DIR)/tests/*.h) | $(FC_LIBS)
	@mkdir -p $(@D)
	$(CC) $(FC_EXFLAGS) -I$(FC_EXDIR) -o $@ $< $(LDFLAGS_COMMON) -L$(LIB) -Wl,-rpath,'$$ORIGIN/../../lib' -lcudart -lcuda -ldl
