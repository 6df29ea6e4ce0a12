# `make build` on a machine without the build dependencies stops at once
# with one line naming `make deps` (which installs them), not with make's
# "No rule to make target '/usr/include/slurm/spank.h'" or a compiler error.
# `make test` and `make demo` run `deps` first and are not checked here.
BUILD_TOOLS   := $(CC) pkg-config
BUILD_HEADERS := /usr/include/slurm/spank.h
BUILD_CHECKED_GOALS := build spank native

ifneq ($(filter $(BUILD_CHECKED_GOALS),$(MAKECMDGOALS)),)
BUILD_MISSING := $(strip $(foreach t,$(BUILD_TOOLS),$(if $(shell command -v $(t) 2>/dev/null),,$(t))) \
                         $(foreach h,$(BUILD_HEADERS),$(if $(wildcard $(h)),,$(h))))
ifneq ($(BUILD_MISSING),)
$(error missing $(BUILD_MISSING): run 'make deps' (as root) to install the build dependencies)
endif
endif
