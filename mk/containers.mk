# containers: the container runtimes the container suite (tests/containers)
# runs jobs in, built under build/containers from their public sources at
# pinned commits, and the image it runs: enroot (NVIDIA/enroot), pyxis
# (NVIDIA/pyxis, against this machine's Slurm headers, libslurm-dev) and
# Apptainer (apptainer/apptainer, Go modules through the module proxy; no
# Debian 12 package exists), and a Debian 11 (glibc 2.31) squashfs image.
#
# Sources: the commits, archives and checksums are pinned in
# mk/sources.txt, and scripts/sources.sh finds each archive (mk/sources.mk):
# in the machine's cache (GPUSLICE_CACHE/sources), in GPUSLICE_SOURCES
# (checked against its SHA256SUMS), or at the project's GitHub URL. With
# none of them, the runtime is not built: build/containers/NAME/UNAVAILABLE
# says what is missing, `make containers` prints it and the suite's tests of
# that runtime skip with it. Each built runtime's build/containers/NAME/COMMIT
# names the commit.
#
# Packages (make deps, mk/deps.mk): squashfs-tools (mksquashfs, unsquashfs),
# libbsd-dev (enroot's helpers on glibc), makeself (enroot's self-extracting
# bundles), squashfuse and fuse-overlayfs (enroot starting a squashfs
# image), libseccomp-dev, zstd; debootstrap for the image. Debian 11 is
# still served by deb.debian.org (checked November 2026); when it moves to
# archive.debian.org, set IMAGE_MIRROR (scripts/container-image.sh).
CT             := $(BUILD)/containers
CONTAINERS_CACHE  ?= $(GPUSLICE_CACHE)/containers
# Pinned commits (mk/sources.txt): enroot's main after v4.1.2, pyxis v0.24.0,
# Apptainer v1.5.3.
ENROOT_COMMIT    := $(call src_field,enroot,$(SRC_VERSION))
PYXIS_COMMIT     := $(call src_field,pyxis,$(SRC_VERSION))
APPTAINER_COMMIT := $(call src_field,apptainer,$(SRC_VERSION))
APPTAINER_VERSION:= 1.5.3
CT_SRC         := $(SOURCES_SH) $(SOURCES_TABLE)
# The image: Debian 11's root (debootstrap, cached as a tarball in
# CONTAINERS_CACHE) with the suite's CUDA program built for its glibc.
CT_IMAGE       := $(CT)/images/bullseye.sqsh
CT_PROBE       := $(CT)/probe/gs_probe
OLDGLIBC_LIBDIR:= $(OLDGLIBC)/root/lib/x86_64-linux-gnu
OLDGLIBC_USRDIR:= $(OLDGLIBC)/root/usr/lib/x86_64-linux-gnu

.PHONY: containers enroot pyxis apptainer container-image test-containers

containers: enroot pyxis apptainer container-image ## build enroot, pyxis, Apptainer (pinned commits, cached sources) and the Debian 11 test image under build/containers

enroot: $(CT)/enroot/.stamp
pyxis: $(CT)/pyxis/.stamp
apptainer: $(CT)/apptainer/.stamp
container-image: $(CT_IMAGE)

# ct_source NAME COMMIT: unpack the source into $(CT)/src/NAME
# (scripts/sources.sh), or record why it cannot be had (UNAVAILABLE) and
# stop the recipe there without failing the build. An archive an earlier
# layout kept in CONTAINERS_CACHE moves to the sources cache.
define ct_source
	@rm -f $(CT)/$(1)/UNAVAILABLE
	@mkdir -p $(CT)/$(1) $(GPUSLICE_CACHE)/sources
	@[ ! -f $(CONTAINERS_CACHE)/$(1)-$(2).tar.gz ] || mv $(CONTAINERS_CACHE)/$(1)-$(2).tar.gz $(GPUSLICE_CACHE)/sources/
	@rc=0; $(SOURCES_ENV) $(SOURCES_SH) unpack $(1) $(CT)/src/$(1) 2>$(CT)/$(1)/why || rc=$$?; \
	if [ $$rc = 3 ]; then mv $(CT)/$(1)/why $(CT)/$(1)/UNAVAILABLE; \
	  echo "containers: $(1) not built: $$(cat $(CT)/$(1)/UNAVAILABLE)" >&2; \
	elif [ $$rc != 0 ]; then cat $(CT)/$(1)/why >&2; exit $$rc; \
	else cat $(CT)/$(1)/why; rm -f $(CT)/$(1)/why; echo $(2) >$(CT)/src/$(1)/.commit; fi
endef

# enroot: its helpers are built on glibc (FORCE_GLIBC) instead of musl: the
# musl, kernel-headers and makeself submodules live on GitHub and other
# hosts; the system's kernel headers, Debian's libbsd (strlcpy, which glibc
# 2.36 lacks) and Debian's makeself stand in. Installed with its
# configuration under build/containers/enroot (etc/enroot/hooks.d...).
$(CT)/enroot/.stamp: mk/containers.mk $(CT_SRC)
	$(call ct_source,enroot,$(ENROOT_COMMIT))
	@[ -f $(CT)/enroot/UNAVAILABLE ] || { \
	  set -e; s=$(CT)/src/enroot; \
	  mkdir -p $$s/deps/linux-headers $$s/deps/makeself && touch $$s/deps/linux-headers/.stamp $$s/deps/makeself/.stamp; \
	  install -D -m 0755 /usr/bin/makeself $$s/deps/dist/makeself/bin/enroot-makeself; \
	  echo "enroot: building $(ENROOT_COMMIT)"; \
	  CFLAGS="-D_GNU_SOURCE -include bsd/string.h" LDFLAGS="-Wl,--no-as-needed -l:libbsd.so -Wl,--as-needed" \
	    $(MAKE) -s -C $$s FORCE_GLIBC=1 prefix=$(CT)/enroot all install >$(CT)/enroot/build.log 2>&1 || { tail -n 30 $(CT)/enroot/build.log >&2; exit 1; }; \
	  echo $(ENROOT_COMMIT) > $(CT)/enroot/COMMIT; touch $@; }

# pyxis: the SPANK plugin, against /usr/include/slurm (Slurm 22.05).
$(CT)/pyxis/.stamp: mk/containers.mk $(CT_SRC) $(BUILD_HEADERS)
	$(call ct_source,pyxis,$(PYXIS_COMMIT))
	@[ -f $(CT)/pyxis/UNAVAILABLE ] || { \
	  set -e; echo "pyxis: building $(PYXIS_COMMIT)"; \
	  $(MAKE) -s -C $(CT)/src/pyxis prefix=$(CT)/pyxis libdir=$(CT)/pyxis/lib all install >$(CT)/pyxis/build.log 2>&1 || { tail -n 30 $(CT)/pyxis/build.log >&2; exit 1; }; \
	  echo $(PYXIS_COMMIT) > $(CT)/pyxis/COMMIT; touch $@; }

# pyxis-releases: the same source against the headers of each SchedMD
# release the full end-to-end suite runs on (SLURM_E2E_FULL, mk/slurm-src.mk),
# in build/containers/pyxis-RELEASE, built in a copy of the source (pyxis
# builds in its tree). Without the source or the release, UNAVAILABLE says
# which is missing. Slurm loads a plugin only into the release it was
# built for, as it does gpuslice's.
PYXIS_RELEASES := $(SLURM_E2E_FULL)
.PHONY: pyxis-releases
pyxis-releases: $(PYXIS_RELEASES:%=$(CT)/pyxis-%/.stamp) ## build pyxis for each SchedMD release the full e2e suite runs on (make slurm-src builds the release)
test-slurm-all test-long $(PYXIS_RELEASES:%=test-slurm-%): pyxis-releases

$(CT)/pyxis-%/.stamp: $(CT)/pyxis/.stamp $(SLURM_SRC)/%/.stamp
	@rm -rf $(@D) && mkdir -p $(@D)
	@if [ -f $(CT)/pyxis/UNAVAILABLE ]; then cp $(CT)/pyxis/UNAVAILABLE $(@D)/UNAVAILABLE; \
	elif [ -f $(SLURM_SRC)/$*/UNAVAILABLE ]; then echo "Slurm $* is not built: $$(cat $(SLURM_SRC)/$*/UNAVAILABLE)" >$(@D)/UNAVAILABLE; \
	else set -e; echo "pyxis: building $(PYXIS_COMMIT) for Slurm $*"; \
	  cp -r $(CT)/src/pyxis $(@D)/src; $(MAKE) -s -C $(@D)/src clean; \
	  CPPFLAGS=-I$(SLURM_SRC)/$*/include $(MAKE) -s -C $(@D)/src prefix=$(@D) libdir=$(@D)/lib all install >$(@D)/build.log 2>&1 || { tail -n 30 $(@D)/build.log >&2; exit 1; }; \
	  rm -rf $(@D)/src; echo $(PYXIS_COMMIT) >$(@D)/COMMIT; touch $@; fi

# Apptainer: without the setuid starter (the suite runs it as root),
# network plugins, libsubid and seccomp. Its Go modules come through the
# module proxy into the module cache. Installed under build/containers/
# apptainer (etc/apptainer/apptainer.conf...). Its build runs `go clean
# -cache`: it gets a Go build cache of its own, removed afterwards. The
# build takes 3 to 6 minutes on 2 cores, so the installed tree is kept in
# CONTAINERS_CACHE too, keyed by commit. An installation without the setuid
# starter is relocatable (Apptainer finds its etc/ and libexec/ from where
# its binary is), so a checkout at another path unpacks the same tree.
APPTAINER_TARBALL = $(CONTAINERS_CACHE)/apptainer-$(APPTAINER_COMMIT)-installed.tar.zst
$(CT)/apptainer/.stamp: mk/containers.mk $(CT_SRC) $(TREE_CACHE)
	@if $(TREE_CACHE) unpack $(APPTAINER_TARBALL) $(CT)/apptainer; then \
	  echo "apptainer: unpacked $(APPTAINER_TARBALL)"; touch $@; fi
	@[ -f $@ ] || $(MAKE) -s --no-print-directory apptainer-build

.PHONY: apptainer-build
# Apptainer's build empties the Go build cache before compiling its
# starter (`go clean -cache`, for a tree whose C sources changed under a
# warm cache); a tree unpacked fresh has none to go stale, so the rule marks
# that step done and builds with its own Go build cache, kept outside
# build/ like Go's own: a rebuild on the same machine (a fresh clone) then
# takes about a minute instead of six. Its version comes from the VERSION
# file, as in a release tarball: git is kept from finding this repository
# around build/ (it would name this project's commit as Apptainer's).
APPTAINER_GOCACHE ?= $(GPUSLICE_CACHE)/apptainer-go-build
apptainer-build:
	$(call ct_source,apptainer,$(APPTAINER_COMMIT))
	@[ -f $(CT)/apptainer/UNAVAILABLE ] || { \
	  set -e; s=$(CT)/src/apptainer; echo $(APPTAINER_VERSION) > $$s/VERSION; \
	  echo "apptainer: building $(APPTAINER_COMMIT) (3 to 6 minutes on 2 cores the first time on a machine, one after)"; \
	  { cd $$s && export GOCACHE=$(APPTAINER_GOCACHE) GIT_CEILING_DIRECTORIES=$(CT)/src && \
	    ./mconfig --without-suid --without-network --without-libsubid --without-seccomp \
	      -b $$s/builddir --prefix=$(CT)/apptainer && touch $$s/builddir/.clean-starter && \
	      $(MAKE) -C $$s/builddir && $(MAKE) -C $$s/builddir install; } \
	    >$(CT)/apptainer/build.log 2>&1 || { tail -n 30 $(CT)/apptainer/build.log >&2; exit 1; }; \
	  rm -rf $$s/builddir; \
	  v=$$($(CT)/apptainer/bin/apptainer --version); [ "$$v" = "apptainer version $(APPTAINER_VERSION)" ] || \
	    { echo "apptainer: the build says '$$v', want $(APPTAINER_VERSION)" >&2; exit 1; }; \
	  echo $(APPTAINER_COMMIT) > $(CT)/apptainer/COMMIT; \
	  $(TREE_CACHE) save $(APPTAINER_TARBALL) $(CT)/apptainer 'apptainer-*-installed.tar.zst' --exclude=./build.log; \
	  touch $(CT)/apptainer/.stamp; }

# The suite's CUDA program, built against Debian 11's glibc 2.31 (make
# old-glibc) so that it runs on the image's own libc; it finds fakecuda's
# libcuda.so.1 and libnvidia-ml.so.1 wherever the container's loader looks.
$(CT_PROBE): $(GS_DIR)/tests/gs_probe.c $(wildcard $(ROOT)/native/include/*.h) $(OLDGLIBC)/.stamp | fakecuda-libs
	@mkdir -p $(@D)
	$(CC) --sysroot=$(OLDGLIBC)/root -B$(OLDGLIBC_USRDIR)/ -L$(OLDGLIBC_USRDIR) -L$(OLDGLIBC_LIBDIR) \
	  -isystem $(OLDGLIBC)/root/usr/include -O2 -g $(CWARN) -D_GNU_SOURCE -pthread -I$(ROOT)/native/include \
	  -o $@ $< -L$(LIB) -Wl,-rpath-link,$(OLDGLIBC_LIBDIR) -lcuda -lnvidia-ml -l:libdl.so.2 -l:libpthread.so.0

# The image. When the archive is unreachable it is not made and
# build/containers/images/UNREACHABLE says why (the suite skips with it).
$(CT_IMAGE): scripts/container-image.sh $(TREE_CACHE) $(DEBOOTSTRAP) $(CT_PROBE)
	$(call unless_unreachable,$(ROOT)/scripts/container-image.sh build $@ $(CONTAINERS_CACHE) $(CT_PROBE),container-image: Debian archive unreachable; the container suite will skip)

# The suite: real gpusliced, interceptor and fakecuda; jobs (stand-ins for
# slurmstepd, as tests/security) run enroot start and apptainer exec of the
# image. As root; a runtime that could not be built skips with its reason.
test-containers: containers fakecuda-libs interceptor go-build spank ## container suite: enroot and Apptainer jobs held to their quota (root)
	GPUSLICE_BUILD_DIR=$(BUILD) $(GO) test -count=1 -timeout 10m ./tests/containers/...

