# interceptor: libgpuslice.so (LD_PRELOAD) from native/interceptor, its C
# test programs, and the interceptor / cross-component test suites.
.PHONY: interceptor interceptor-tests test-interceptor test-core test-scale

GS_DIR      := $(ROOT)/native/interceptor
GS_OBJDIR   := $(BUILD)/obj/interceptor
GS_GENDIR   := $(BUILD)/gen/interceptor
GS_TESTBIN  := $(BUILD)/tests/interceptor
GS_LIBSO    := $(LIB)/libgpuslice.so
GS_MAP      := $(GS_GENDIR)/exports.map
GS_SRCS     := $(wildcard $(GS_DIR)/*.c)
GS_OBJS     := $(patsubst $(GS_DIR)/%.c,$(GS_OBJDIR)/%.o,$(GS_SRCS))
GS_HDRS     := $(wildcard $(GS_DIR)/*.h) $(GS_DIR)/hooks.def \
               $(wildcard $(ROOT)/native/include/*.h)
GS_CFLAGS   := $(CFLAGS_COMMON) $(GLIBC_COMPAT_CFLAGS) -DGLIBC_COMPAT_DEFINES_DLSYM -fvisibility=hidden -I$(ROOT)/native/include -I$(GS_DIR)
GS_T_SRCS   := $(wildcard $(GS_DIR)/tests/*.c)
GS_T_BINS   := $(patsubst $(GS_DIR)/tests/%.c,$(GS_TESTBIN)/%,$(GS_T_SRCS))
GS_T_CFLAGS := $(CFLAGS_COMMON) -I$(ROOT)/native/include
GS_T_LIBS   := -L$(LIB) -Wl,-rpath,'$$ORIGIN/../../lib' -lcuda -lnvidia-ml -ldl

interceptor: $(GS_LIBSO) ## build build/lib/libgpuslice.so

$(GS_OBJDIR)/%.o: $(GS_DIR)/%.c $(GS_HDRS)
	@mkdir -p $(@D)
	$(CC) $(GS_CFLAGS) -c $< -o $@

# The version script is expanded from hooks.def (exports.map.in). The
# library binds its references to its own functions at link time
# (-Bsymbolic; it exports functions only): preloaded, it comes first in the
# lookup scope and would find them anyway, and the loader has ~60 fewer
# symbols to look up in every process.
$(GS_MAP): $(GS_DIR)/exports.map.in $(GS_DIR)/hooks.def
	@mkdir -p $(@D)
	$(CC) -E -P -x c -I$(GS_DIR) $< -o $@

$(GS_LIBSO): $(GS_OBJS) $(GS_MAP)
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $(GS_OBJS) $(LDFLAGS_COMMON) -Wl,-Bsymbolic -Wl,--version-script=$(GS_MAP) \
		-Wl,-soname,libgpuslice.so -Wl,--no-undefined $(GLIBC_COMPAT_LIBS)

# Small C programs the suites run (against fakecuda's libcuda.so.1).
interceptor-tests: $(GS_T_BINS)

$(GS_TESTBIN)/%: $(GS_DIR)/tests/%.c $(wildcard $(ROOT)/native/include/*.h) | fakecuda-libs
	@mkdir -p $(@D)
	$(CC) $(GS_T_CFLAGS) -o $@ $< $(LDFLAGS_COMMON) $(GS_T_LIBS)

test-interceptor: fakecuda-libs interceptor interceptor-tests ## interceptor library tests (fake peer, exports, dlsym)
	$(GO) test -count=1 ./tests/interceptor/...

test-scale: fakecuda-libs fakecuda-examples interceptor interceptor-tests go-build ## scale tests at full size: 4,096 processes in one session (minutes on 2 cores)
	GPUSLICE_SCALE_TESTS=1 $(GO) test -count=1 -timeout 30m -run 'TestSessionServesManyProcesses|TestRestartKeepsManySessions|TestIdleSessionsCostNoFDAndTwoPages' ./tests/core/

test-core: fakecuda-libs fakecuda-examples interceptor interceptor-tests ctxprobe go-build old-glibc ## cross-component tests: gpusliced + interceptor + fakecuda
	$(GO) test -count=1 -timeout 20m ./tests/core/...
