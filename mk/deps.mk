# deps: install what builds and tests need. Debian packages via apt-get when
# running as root; Go modules through the module proxy.
# What SchedMD's Slurm releases are built with (make slurm-src,
# scripts/slurm-src.sh): munge, MariaDB's client (slurmdbd's storage), Lua 5.4
# (job_submit/lua), hwloc, D-Bus (cgroup/v2 needs it and the kernel's BPF
# headers), PAM, NUMA, JSON, lz4; patchelf makes the installed tree
# relocatable.
SLURM_SRC_DEB_PKGS := libmunge-dev libmariadb-dev liblua5.4-dev libhwloc-dev libdbus-1-dev linux-libc-dev \
            libpam0g-dev libnuma-dev libjson-c-dev libyaml-dev liblz4-dev libreadline-dev patchelf
DEB_PKGS := gcc make libc6-dev pkg-config libslurm-dev slurmd slurmctld slurm-client munge \
            rpm lintian prometheus systemd passwd procps \
            lua5.1 lua5.4 slurmdbd mariadb-server iproute2 tmux debootstrap ffmpeg \
            python3 python3-numpy python3-pytools python3-platformdirs valgrind \
            squashfs-tools squashfuse fuse-overlayfs fuse3 libbsd-dev makeself libseccomp-dev zstd graphviz \
            openssh-server openssh-client libpam-slurm-adopt \
            $(SLURM_SRC_DEB_PKGS)

.PHONY: deps
deps: ## install build/test dependencies (apt-get as root, go mod download)
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done | tr '\n' ' '); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing $$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	  else echo "deps: missing Debian packages (run as root or install): $$missing" >&2; exit 1; fi; \
	fi
	@$(GO) mod download

# An older glibc (Debian 11's 2.31) unpacked under build/, never installed:
# tests/core builds a program against it and runs it with its own ld.so and
# the interceptor preloaded (native/include/glibc_compat.h says why). The
# packages come from Debian's archive with apt-get and a private package
# list; nothing of the machine's apt state changes.
OLDGLIBC      := $(BUILD)/glibc-2.31
OLDGLIBC_PKGS := libc6/bullseye libc6-dev/bullseye linux-libc-dev/bullseye
OLDGLIBC_APT  := -o Dir::Etc::SourceList=$(OLDGLIBC)/apt/sources.list -o Dir::Etc::SourceParts=/dev/null \
                 -o Dir::State::Lists=$(OLDGLIBC)/apt/lists -o Dir::Cache=$(OLDGLIBC)/apt/cache \
                 -o APT::Sandbox::User=root

.PHONY: old-glibc
old-glibc: $(OLDGLIBC)/.stamp ## fetch glibc 2.31 (Debian 11) into build/ for the old-glibc test

$(OLDGLIBC)/.stamp:
	@rm -rf $(OLDGLIBC)
	@mkdir -p $(OLDGLIBC)/apt/lists/partial $(OLDGLIBC)/apt/cache/archives/partial $(OLDGLIBC)/debs
	@echo "deb http://deb.debian.org/debian bullseye main" > $(OLDGLIBC)/apt/sources.list
	@echo "old-glibc: fetching $(OLDGLIBC_PKGS)"
	@apt-get -qq $(OLDGLIBC_APT) update
	@cd $(OLDGLIBC)/debs && apt-get -qq $(OLDGLIBC_APT) download $(OLDGLIBC_PKGS) >/dev/null
	@for d in $(OLDGLIBC)/debs/*.deb; do dpkg-deb -x $$d $(OLDGLIBC)/root || exit 1; done
	@test -x $(OLDGLIBC)/root/lib/x86_64-linux-gnu/ld-2.31.so
	@mkdir -p $(OLDGLIBC)/root/lib64 && ln -sfn ../lib/x86_64-linux-gnu/ld-2.31.so $(OLDGLIBC)/root/lib64/ld-linux-x86-64.so.2
	@touch $@
