# gpuslice-ctxprobe: what a context costs on each idle GPU, run by gpusliced
# (native/ctxprobe/ctxprobe.c; docs/daemon.md "Context cost").
CTXPROBE := $(BIN)/gpuslice-ctxprobe

.PHONY: ctxprobe
ctxprobe: $(CTXPROBE) ## build build/bin/gpuslice-ctxprobe

$(CTXPROBE): $(ROOT)/native/ctxprobe/ctxprobe.c $(wildcard $(ROOT)/native/include/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_COMMON) -I$(ROOT)/native/include -o $@ $< $(LDFLAGS_COMMON) -ldl
