# packaging: `make install`, the .deb (nfpm, pinned in tools/go.mod) and
# .rpm (rpmbuild, packaging/gpuslice.spec) packages, the release tarball
# (make dist) and their tests.

# ---- Version ----------------------------------------------------------------
# dpkg and rpm need a version that sorts; packaging/version.sh turns the git
# describe output (a bare commit hash when no tag exists) into one, e.g.
# 0.0.0~git20261122002523.d7a75d1. The packages and the --version of every
# program carry that same string: when VERSION is not already it, install and
# packages run make again with VERSION set to it.
PKG_VERSION   := $(shell $(ROOT)/packaging/version.sh '$(VERSION)')
DIST          ?= $(ROOT)/dist
VERSION_STAMP := $(BUILD)/.version
# deb: Debian and Ubuntu, rpm: EL (SchedMD's RPM layout). Each carries the
# SPANK plugin of every release of PKG_SLURM_RELEASES (make spank-releases:
# Debian 12's 22.05, Debian 13's 24.11, SchedMD's releases built from source);
# one whose plugin could not be built here (Debian's archive unreachable, no
# source found) is left out with a line saying why.
PKG_FORMATS   ?= deb rpm
PKG_SLURM_RELEASES ?= 22.05 24.11 $(SLURM_SRC_RELEASES)

# Programs that embed the version are rebuilt when it changes (go.mk has its
# own stamp for gpusliced and gpuslice; this one also covers the Prolog/Epilog).
$(BIN)/gpusliced $(BIN)/gpuslice $(BIN)/gpuslice-prolog $(BIN)/gpuslice-epilog: $(VERSION_STAMP)
$(VERSION_STAMP): packaging-force
	@mkdir -p $(@D)
	@[ "$$(cat $@ 2>/dev/null)" = '$(VERSION)' ] || echo '$(VERSION)' >$@

.PHONY: packaging-force
packaging-force:

define check-pkg-version
$(if $(PKG_VERSION),,$(error cannot derive a package version from VERSION='$(VERSION)'))
endef

# ---- make install -------------------------------------------------------------
PREFIX          ?= /usr/local
DESTDIR         ?=
BINDIR          ?= $(PREFIX)/bin
SBINDIR         ?= $(PREFIX)/sbin
LIBDIR          ?= $(PREFIX)/lib
LIBEXECDIR      ?= $(PREFIX)/libexec
DATADIR         ?= $(PREFIX)/share
DOCDIR          ?= $(DATADIR)/doc/gpuslice
MANDIR          ?= $(DATADIR)/man
SYSCONFDIR      ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
SYSTEMDUNITDIR  ?= $(LIBDIR)/systemd/system
# Slurm's PluginDir differs between distributions; the installed
# plugstack.conf snippet names the plugin by absolute path.
SLURM_PLUGINDIR ?= $(LIBDIR)/slurm
SLURM_SYSCONFDIR?= $(SYSCONFDIR)/slurm

# The files in etc/ name the packaged paths (/usr/..., /etc/...); rewrite them
# for PREFIX (identity when PREFIX=/usr). Longest paths first. The
# plugstack.conf line names the plugin by absolute path, since SLURM_PLUGINDIR
# is usually not Slurm's PluginDir.
INSTALL_SED := -e 's@^\(required\|optional\)\([[:space:]]\{1,\}\)gpuslice\.so\b@\1\2$(SLURM_PLUGINDIR)/gpuslice.so@' \
               -e 's|/usr/lib/[a-z0-9_]*-linux-gnu/slurm-wlm/gpuslice\.so|$(SLURM_PLUGINDIR)/gpuslice.so|g' \
               -e 's|/usr/lib64/slurm/gpuslice\.so|$(SLURM_PLUGINDIR)/gpuslice.so|g' \
               -e 's|/usr/sbin/gpusliced|$(SBINDIR)/gpusliced|g' \
               -e 's|/usr/bin/gpuslice|$(BINDIR)/gpuslice|g' \
               -e 's|/usr/libexec/gpuslice/|$(LIBEXECDIR)/gpuslice/|g' \
               -e 's|/usr/lib/gpuslice\b|$(LIBDIR)/gpuslice|g' \
               -e 's|/usr/share/gpuslice/|$(DATADIR)/gpuslice/|g' \
               -e 's|/usr/share/doc/gpuslice|$(DOCDIR)|g' \
               -e 's|/etc/gpuslice/|$(SYSCONFDIR)/gpuslice/|g' \
               -e 's|/etc/slurm/|$(SLURM_SYSCONFDIR)/|g'

# install-conf SRC DST: install a configuration file, rewritten for PREFIX,
# unless one is already there (an admin's edits are never overwritten).
define install-conf
	@if [ -e '$(DESTDIR)$(2)' ]; then \
	  echo "install: keeping existing $(DESTDIR)$(2)"; \
	else \
	  install -d -m 0755 '$(dir $(DESTDIR)$(2))' && \
	  sed $(INSTALL_SED) '$(1)' >'$(DESTDIR)$(2).tmp' && chmod 0644 '$(DESTDIR)$(2).tmp' && \
	  mv '$(DESTDIR)$(2).tmp' '$(DESTDIR)$(2)' && echo "install: $(DESTDIR)$(2)"; \
	fi
endef

define install-recipe
	install -d -m 0755 '$(DESTDIR)$(SBINDIR)' '$(DESTDIR)$(BINDIR)' '$(DESTDIR)$(LIBDIR)/gpuslice' \
	  '$(DESTDIR)$(LIBEXECDIR)/gpuslice' '$(DESTDIR)$(SLURM_PLUGINDIR)' '$(DESTDIR)$(SYSTEMDUNITDIR)' \
	  '$(DESTDIR)$(DOCDIR)' '$(DESTDIR)$(MANDIR)/man1' '$(DESTDIR)$(MANDIR)/man8' \
	  '$(DESTDIR)$(DATADIR)/gpuslice/monitoring' '$(DESTDIR)$(DATADIR)/gpuslice/apptainer' \
	  '$(DESTDIR)$(SYSCONFDIR)/enroot/hooks.d'
	install -m 0755 '$(BIN)/gpusliced' '$(DESTDIR)$(SBINDIR)/gpusliced'
	install -m 0755 '$(BIN)/gpuslice' '$(DESTDIR)$(BINDIR)/gpuslice'
	install -m 0755 '$(BIN)/gpuslice-prolog' '$(BIN)/gpuslice-epilog' '$(BIN)/gpuslice-ctxprobe' '$(DESTDIR)$(LIBEXECDIR)/gpuslice/'
	install -m 0644 '$(LIB)/libgpuslice.so' '$(DESTDIR)$(LIBDIR)/gpuslice/libgpuslice.so'
	install -m 0644 '$(BUILD)/spank/gpuslice.so' '$(DESTDIR)$(SLURM_PLUGINDIR)/gpuslice.so'
	sed $(INSTALL_SED) etc/systemd/gpusliced.service >'$(DESTDIR)$(SYSTEMDUNITDIR)/gpusliced.service'
	chmod 0644 '$(DESTDIR)$(SYSTEMDUNITDIR)/gpusliced.service'
	sed $(INSTALL_SED) etc/slurm/slurm.conf.fragment >'$(DESTDIR)$(DOCDIR)/slurm.conf.fragment'
	install -m 0644 docs/*.md docs/*.svg '$(DESTDIR)$(DOCDIR)/'
	install -m 0644 etc/monitoring/gpuslice-alerts.yml etc/monitoring/gpuslice-dashboard.json \
	  '$(DESTDIR)$(DATADIR)/gpuslice/monitoring/'
	install -m 0644 etc/slurm/job_submit.lua '$(DESTDIR)$(DATADIR)/gpuslice/job_submit.lua'
	sed $(INSTALL_SED) etc/enroot/50-gpuslice.sh >'$(DESTDIR)$(SYSCONFDIR)/enroot/hooks.d/50-gpuslice.sh'
	chmod 0755 '$(DESTDIR)$(SYSCONFDIR)/enroot/hooks.d/50-gpuslice.sh'
	sed $(INSTALL_SED) etc/apptainer/gpuslice.conf >'$(DESTDIR)$(DATADIR)/gpuslice/apptainer/gpuslice.conf'
	sed $(INSTALL_SED) etc/apptainer/gpuslice.preload >'$(DESTDIR)$(DATADIR)/gpuslice/apptainer/ld.so.preload'
	chmod 0644 '$(DESTDIR)$(DATADIR)/gpuslice/apptainer/gpuslice.conf' '$(DESTDIR)$(DATADIR)/gpuslice/apptainer/ld.so.preload'
	sed $(INSTALL_SED) etc/apptainer/taskprolog.sh >'$(DESTDIR)$(DATADIR)/gpuslice/apptainer/taskprolog.sh'
	chmod 0755 '$(DESTDIR)$(DATADIR)/gpuslice/apptainer/taskprolog.sh'
	install -m 0644 docs/man/gpuslice.1 '$(DESTDIR)$(MANDIR)/man1/gpuslice.1'
	install -m 0644 docs/man/gpusliced.8 '$(DESTDIR)$(MANDIR)/man8/gpusliced.8'
	$(call install-conf,etc/gpusliced.yaml,$(SYSCONFDIR)/gpuslice/gpusliced.yaml)
	$(call install-conf,etc/plugstack.conf.d/gpuslice.conf,$(SLURM_SYSCONFDIR)/plugstack.conf.d/gpuslice.conf)
endef

.PHONY: install packages dist test-packages

ifeq ($(VERSION),$(PKG_VERSION))
install: build ## install under PREFIX (/usr/local) into DESTDIR: daemon, CLI, interceptor, SPANK plugin, Prolog/Epilog, unit, configs
	$(install-recipe)

packages: build spank-releases ## build the .deb and .rpm packages (gpuslice, gpuslice-fakecuda) into dist/, with the plugin of every Slurm release
	$(check-pkg-version)
	@$(pkg-releases); \
	echo "BUILD='$(BUILD)' GPUSLICE_SLURM_RELEASES='$${releases# }' packaging/build-packages.sh '$(PKG_VERSION)' '$(DIST)' $(PKG_FORMATS)"; \
	BUILD='$(BUILD)' GO='$(GO)' GPUSLICE_SLURM_RELEASES="$${releases# }" \
	  $(ROOT)/packaging/build-packages.sh '$(PKG_VERSION)' '$(DIST)' $(PKG_FORMATS)

dist: spank-releases ## write the release tarball dist/gpuslice-VERSION.tar.gz: sources, vendored Go modules, gpuslice.spec, the plugin of every Slurm release (docs/build-packages.md)
	$(check-pkg-version)
	@$(pkg-releases); \
	BUILD='$(BUILD)' GO='$(GO)' GPUSLICE_SLURM_RELEASES="$${releases# }" \
	  $(ROOT)/packaging/dist.sh '$(PKG_VERSION)' '$(DIST)'
else
install packages dist:
	$(check-pkg-version)
	$(MAKE) --no-print-directory $@ VERSION='$(PKG_VERSION)'
endif

# pkg-releases: a recipe's shell sets releases to the releases of
# PKG_SLURM_RELEASES whose plugin was built, with a line for each left out.
define pkg-releases
releases=; for r in $(PKG_SLURM_RELEASES); do \
	  case $$r in \
	  22.05) why= ;; \
	  24.11) why=$$(cat '$(TRIXIE)/UNREACHABLE' 2>/dev/null) ;; \
	  *) why=$$(cat '$(SLURM_SRC)/'"$$r"/UNAVAILABLE 2>/dev/null) ;; \
	  esac; \
	  if [ -n "$$why" ]; then echo "packages: no plugin for Slurm $$r: $$why" >&2; else releases="$$releases $$r"; fi; \
	done
endef

# ---- Building from the release tarball -----------------------------------------
# What gpuslice.spec's %build runs in the unpacked tarball, and `make
# release-deb` there (docs/build-packages.md): the programs, built with the
# host's compiler and C library, and the SPANK plugin against the host's
# Slurm headers, SLURM_INCLUDEDIR/slurm/spank.h, when there are some
# (SLURM_INCLUDEDIR= builds none). The packages carry it for the host's
# release and the tarball's spank/prebuilt/RELEASE plugins for the others.
SLURM_INCLUDEDIR ?= /usr/include
SPANK_HOST_DIR   := $(BUILD)/spank-host
PKG_WORK         ?= $(BUILD)/pkgwork
RELEASE_PLUGIN_DIRS = $(wildcard $(ROOT)/spank/prebuilt/*) $(wildcard $(SPANK_HOST_DIR))

.PHONY: release-build release-stage release-deb
release-build: fakecuda-libs fakecuda-examples interceptor ctxprobe go-build $(PROLOG_BINS) ## build what the packages hold, the plugin against SLURM_INCLUDEDIR's Slurm headers (/usr/include) if any (the release tarball's build)
	@rm -rf '$(SPANK_HOST_DIR)'
	@if [ -n '$(SLURM_INCLUDEDIR)' ] && [ -f '$(SLURM_INCLUDEDIR)/slurm/spank.h' ]; then \
	  mkdir -p '$(SPANK_HOST_DIR)' && \
	  echo "$(CC) $(SPANK_CFLAGS) -I$(SLURM_INCLUDEDIR) $(SPANK_LDFLAGS) -o $(SPANK_HOST_DIR)/gpuslice.so $(SPANK_SRCS)" && \
	  $(CC) $(SPANK_CFLAGS) -I'$(SLURM_INCLUDEDIR)' $(SPANK_LDFLAGS) -o '$(SPANK_HOST_DIR)/gpuslice.so' $(SPANK_SRCS) && \
	  $(SLURM_VERSION_CMD) '$(SLURM_INCLUDEDIR)/slurm/slurm_version.h' >'$(SPANK_HOST_DIR)/slurm-version' && \
	  echo "release-build: SPANK plugin built against $(SLURM_INCLUDEDIR)/slurm/spank.h ($$(cat '$(SPANK_HOST_DIR)/slurm-version'))"; \
	else echo "release-build: no $(SLURM_INCLUDEDIR)/slurm/spank.h: the packages carry the shipped plugins only"; fi

release-stage:
	BUILD='$(BUILD)' GO='$(GO)' GPUSLICE_PLUGIN_DIRS='$(RELEASE_PLUGIN_DIRS)' \
	  $(ROOT)/packaging/build-packages.sh '$(PKG_VERSION)' '$(PKG_WORK)' stage

release-deb: release-build ## in the release tarball: the .deb packages into dist/, the plugin built against the host's Slurm (libslurm-dev)
	BUILD='$(BUILD)' GO='$(GO)' GPUSLICE_PLUGIN_DIRS='$(RELEASE_PLUGIN_DIRS)' \
	  $(ROOT)/packaging/build-packages.sh '$(PKG_VERSION)' '$(DIST)' deb

# The suite installs the packages into this machine with dpkg (root) and
# purges them afterwards; it builds its own older/newer pair for the upgrade,
# and builds the packages from make dist's tarball with rpmbuild -ta (against
# 26.05's headers) and make release-deb (against glibc 2.31: old-glibc),
# about 2 of its minutes (TestReleaseTarball).
test-packages: packages old-glibc trixie-root bookworm-root nvidia-debs ## package tests: contents, lintian, rpm -K, systemd-analyze, install, run, upgrade, the release tarball's rpmbuild -ta (root)
	@$(MAKE) --no-print-directory run-packages
# The tests alone, once the packages are built (a lane of make test-long,
# mk/trixie.mk).
.PHONY: run-packages
run-packages:
	GPUSLICE_BUILD_DIR='$(BUILD)' GPUSLICE_DIST_DIR='$(DIST)' GPUSLICE_PKG_VERSION='$(PKG_VERSION)' \
	  $(GO) test -count=1 -timeout 20m ./tests/packaging/...
