# gpuslice — per-job GPU-memory quotas for Slurm.  `make help` lists targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

ROOT    := $(CURDIR)
# build/, or a directory other users can enter when the checkout is closed
# to them (the tests run build outputs as other users): scripts/build-dir.sh.
ifndef BUILD
BUILD   := $(shell $(CURDIR)/scripts/build-dir.sh '$(CURDIR)')
endif
BIN     := $(BUILD)/bin
LIB     := $(BUILD)/lib
EXAMPLES:= $(BUILD)/examples
# The Slurm suites' cgroup view for hybrid hosts (mk/spank.mk).
SLURM_V2VIEW := $(BUILD)/tests/slurm/libv2view.so
# What the Slurm suites need on either release (mk/spank.mk, mk/trixie.mk);
# containers: the suite runs pyxis and Apptainer jobs.
SLURM_TEST_DEPS := spank go-build fakecuda interceptor ctxprobe $(SLURM_V2VIEW) containers
VERSION ?= $(shell packaging/version.sh 2>/dev/null || echo 0.0.0)
ifeq ($(VERSION),)
VERSION := 0.0.0
endif
GO      ?= go
CC      ?= gcc
# Hardened C flags shared by every native component.
CWARN   := -Wall -Wextra -Werror
CFLAGS_COMMON := -O2 -g $(CWARN) -fstack-protector-strong -D_FORTIFY_SOURCE=2 -D_GNU_SOURCE -fPIC -pthread
LDFLAGS_COMMON := -Wl,-z,relro -Wl,-z,now -pthread
# Shared libraries loaded into other people's processes (the interceptor,
# fakecuda) must load on older glibc too: native/include/glibc_compat.h.
GLIBC_COMPAT_CFLAGS := -include $(ROOT)/native/include/glibc_compat.h
GLIBC_COMPAT_LIBS := -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0
# Go programs: position-independent, RELRO, immediate binding (as the C parts).
GO_BUILDFLAGS := -trimpath -buildmode=pie
GO_HARDEN_LDFLAGS := -bindnow
export BUILD VERSION
# What is slow to fetch or build and the same for every checkout on a
# machine (the Debian 13 root, the container image's root, Apptainer,
# NVIDIA's unpacked packages) is kept here as tarballs keyed by what they
# were made from, so a fresh clone does not make them again; `make clean`
# leaves it, `make cache-clean` removes it.
GPUSLICE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpuslice
# The scripts that keep such a tree in it, and make Debian roots for some.
TREE_CACHE  := $(ROOT)/scripts/tree-cache.sh
DEBOOTSTRAP := $(ROOT)/scripts/debootstrap.sh
# unless_unreachable CMD,SAYS: a recipe line running CMD, whose exit status
# 3 (an archive it fetches from cannot be reached; CMD wrote UNREACHABLE
# with the reason) does not fail the build: SAYS is printed and the tests
# that need what CMD makes skip.
define unless_unreachable
	@rc=0; $(1) || rc=$$?; \
	if [ $$rc = 3 ]; then echo "$(2)" >&2; elif [ $$rc != 0 ]; then exit $$rc; fi
endef

include mk/deps.mk
include mk/fakecuda.mk
include mk/interceptor.mk
include mk/ctxprobe.mk
include mk/go.mk
include mk/trixie.mk
include mk/sources.mk
include mk/slurm-src.mk
include mk/spank.mk
include mk/packaging.mk
include mk/nvidia.mk
include mk/monitoring.mk
include mk/builddeps.mk
include mk/docs.mk
include mk/gpu.mk
include mk/containers.mk
include mk/fuzz.mk
include mk/soak.mk

.PHONY: help build native test test-clean demo bench clean cache-clean fmt vet

help: ## list targets
	@grep -hE '^[a-zA-Z0-9_.-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-16s %s\n",$$1,$$2}'

build: fakecuda interceptor ctxprobe go-build spank ## build everything into build/

# Every suite CI runs, in order.
# test-long is test-slurm-all (every Slurm release), test-compute (the
# GPU time share end to end, mk/go.mk) and test-packages at once
# (mk/trixie.mk).
TEST_SUITES := test-go test-fakecuda test-interceptor test-fuzz test-core test-security \
               test-long test-slurm-src \
               test-nvidia-runtime test-nvidia-tools test-monitoring test-docs test-gpu \
               test-containers
test: deps build $(TEST_SUITES) ## run every test suite (what CI runs)

# What test runs can leave on a machine (a run killed half-way, a hand run
# of one suite): test users, gpuslice packages and state, test daemons,
# network namespaces and mounts. CI runs it before `make test`.
test-clean: ## remove what test runs leave on this machine: test users, gpuslice packages, /var/lib/gpuslice, /run/gpuslice, test daemons, namespaces, mounts (root)
	@bash scripts/test-clean.sh

.PHONY: test-security
test-security: fakecuda-libs fakecuda-examples interceptor interceptor-tests go-build ## attack regression tests: real gpusliced, interceptor and fakecuda (tests/security, as root)
	$(GO) test -count=1 -timeout 10m ./tests/security/...

demo: deps build ## run the demo: gpusliced on a private socket + fakecuda, target_app under a 128 MiB quota
	@bash scripts/demo.sh

fmt: ## gofmt the Go tree
	gofmt -w $$(git ls-files '*.go')

vet: ## go vet
	$(GO) vet ./...

clean: ## remove build outputs
	rm -rf $(BUILD)
	@if [ "$$(readlink $(ROOT)/build)" = "$(BUILD)" ]; then rm -f $(ROOT)/build; fi

cache-clean: ## remove the machine's cache of third-party parts kept across clones (GPUSLICE_CACHE, ~/.cache/gpuslice)
	rm -rf $(GPUSLICE_CACHE)
