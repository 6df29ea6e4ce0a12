#!/bin/bash
# slurm-src.sh: one of SchedMD's Slurm releases (mk/sources.txt) built from
# its source as a GPU cluster runs it, installed in a directory of its own,
# for mk/slurm-src.mk.
#
#   slurm-src.sh build RELEASE DIR CACHE   make DIR (e.g. build/slurm/25.05),
#                                          or unpack CACHE's copy
#   slurm-src.sh key RELEASE               the cache key of RELEASE's tree
#   slurm-src.sh check DIR                 the installed tree's checks alone
#
# What is built: slurmctld, slurmd, slurmstepd, slurmdbd with MySQL/MariaDB
# storage, the client commands, PAM modules, and the plugins a GPU site loads:
# cgroup/v2 (eBPF device control and systemd's D-Bus), job_submit/lua and
# cli_filter/lua (Lua 5.4, as on EL9), hwloc topology, munge
# authentication, NUMA, JSON and YAML output, lz4, and gpu/nvml (GPU
# autodetection and gres/gpumem, gres/gpuutil in accounting). Not built:
# slurmrestd (no http-parser and JWT) and PMIx. configure leaves out what it
# cannot find without failing, so check fails the build when a plugin above
# or a program is missing.
#
# gpu/nvml is compiled against NVIDIA's nvml.h, named by SLURM_NVML_H (the
# Makefile gives the one of NVIDIA's go-nvml module, which the daemon
# builds with). Slurm opens the driver's libnvidia-ml.so at run time, as a
# node has it; configure only links a test program against the library, so
# it is given a stub exporting the calls configure looks for, as CUDA's
# lib64/stubs is on a build host without the driver.
#
# The tree is configured for the prefix /opt/slurm/VERSION, installed with
# DESTDIR and made relocatable: every library path a program or plugin
# holds becomes relative to it ($ORIGIN), so the tree works wherever it is
# unpacked. What Slurm would take from that prefix is given to it instead:
# SLURM_CONF or -f for slurm.conf, PluginDir for the plugins, slurmd -d for
# slurmstepd. DIR/BUILD-INFO names the version, the key and how long
# configure, make and make install took.
#
# CACHE holds one tarball per key (tree-cache.sh). The key hashes the
# archive's pinned SHA-256, the configure options, LAYOUT and the machine's
# distribution (the tree links its libraries): a change to any builds
# afresh. Bump LAYOUT when build() changes what a tree holds.
#
# Exit status 3: no source (scripts/sources.sh); DIR/UNAVAILABLE says why.
set -euo pipefail
LAYOUT=1
here=$(cd "$(dirname "$0")" && pwd)
log() { printf 'slurm-src: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

version_of() { "$here/sources.sh" field "slurm-$1" version; }

# configure_options VERSION: one per line.
configure_options() {
	local v=$1
	printf '%s\n' --prefix=/opt/slurm/"$v" --disable-static \
		--with-munge --with-hwloc --with-mysql_config=/usr/bin --enable-pam \
		--with-lua --enable-cgroupv2 --with-bpf --with-nvml=@NVML@ \
		"lua_CFLAGS=$(pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)" \
		"lua_LIBS=$(pkg-config --libs lua5.4 2>/dev/null || echo -llua5.4)"
}

distribution() {
	(. /etc/os-release && echo "${ID:-} ${VERSION_ID:-}")
}

key() {
	local v
	v=$(version_of "$1")
	{
		"$here/sources.sh" field "slurm-$1" sha256
		configure_options "$v"
		nvml_header | sha256sum
		echo "layout $LAYOUT"
		distribution
	} | sha256sum | cut -c1-16
}

# What a GPU site's Slurm holds; configure leaves any of it out silently
# when a library is missing.
PROGRAMS="sbin/slurmctld sbin/slurmd sbin/slurmstepd sbin/slurmdbd
	bin/srun bin/sbatch bin/salloc bin/scontrol bin/squeue bin/sinfo bin/scancel bin/sacct bin/sacctmgr bin/sstat"
# plugin:library it must link (- for none)
PLUGINS="job_submit_lua:liblua5.4 cli_filter_lua:liblua5.4 accounting_storage_mysql:libmariadb
	jobcomp_mysql:libmariadb cgroup_v2:libdbus-1 task_cgroup:- proctrack_cgroup:- jobacct_gather_cgroup:-
	auth_munge:libmunge cred_munge:libmunge select_cons_tres:- gres_gpu:- gres_shard:- gpu_generic:-
	task_affinity:- accounting_storage_slurmdbd:- gpu_nvml:-"

is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

check() {
	local dir=$1 p f lib need missing=() bad=() out conf
	for p in $PROGRAMS; do
		[ -x "$dir/$p" ] || missing+=("$p")
	done
	for p in $PLUGINS; do
		f=$dir/lib/slurm/${p%%:*}.so lib=${p#*:}
		if [ ! -f "$f" ]; then
			missing+=("lib/slurm/${p%%:*}.so")
		elif [ "$lib" != - ] && ! readelf -d "$f" | grep -q "NEEDED.*\[$lib"; then
			bad+=("lib/slurm/${p%%:*}.so does not link $lib")
		fi
	done
	[ ${#missing[@]} = 0 ] || die "$dir: configure left out ${missing[*]} (a missing -dev package? see $dir/build.log)"
	[ ${#bad[@]} = 0 ] || die "$dir: ${bad[*]}"
	# hwloc: slurmd's topology comes from it.
	need=$(readelf -d "$dir/sbin/slurmd" "$dir/lib/slurm/libslurmfull.so" 2>/dev/null | grep -c 'NEEDED.*libhwloc' || true)
	[ "$need" -gt 0 ] || die "$dir: slurmd does not link libhwloc"
	# Every library resolves, and Slurm's own from this tree.
	while IFS= read -r -d '' f; do
		is_elf "$f" || continue
		out=$(ldd "$f" 2>&1) || continue
		if grep -q 'not found' <<<"$out"; then
			bad+=("$f: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ' | tr '\n' ';')")
		fi
		while read -r lib _ path _; do
			case $lib in libslurm*) case $path in "$dir"/* | not) ;; *) bad+=("$f: $lib from $path") ;; esac ;; esac
		done <<<"$out"
	done < <(find "$dir/bin" "$dir/sbin" "$dir/lib" -type f -print0)
	[ ${#bad[@]} = 0 ] || die "$dir: ${bad[*]}"
	# From 26.05 srun reads slurm.conf before it says its version.
	conf=$(mktemp)
	printf 'ClusterName=check\nSlurmctldHost=localhost\nPluginDir=%s\n' "$dir/lib/slurm" >"$conf"
	out=$(SLURM_CONF=$conf "$dir/bin/srun" --version 2>&1) || { rm -f "$conf"; die "$dir/bin/srun --version: $out"; }
	rm -f "$conf"
	[ "$out" = "slurm $(awk '$1 == "version" {print $2}' "$dir/BUILD-INFO")" ] ||
		die "$dir/bin/srun --version says '$out'"
}

# relocate TREE PREFIX: each library path under PREFIX held by an ELF file
# of TREE becomes relative to that file.
relocate() {
	local tree=$1 prefix=$2 f rpath new e rel
	while IFS= read -r -d '' f; do
		is_elf "$f" || continue
		rpath=$(patchelf --print-rpath "$f" 2>/dev/null) || continue
		[ -n "$rpath" ] || continue
		new=
		IFS=: read -ra entries <<<"$rpath"
		for e in "${entries[@]}"; do
			case $e in
			"$prefix" | "$prefix"/*)
				rel=$(realpath -m --relative-to="$(dirname "$f")" "$tree${e#"$prefix"}")
				e='$ORIGIN'
				[ "$rel" = . ] || e=$e/$rel
				;;
			esac
			new=${new:+$new:}$e
		done
		[ "$new" = "$rpath" ] || patchelf --set-rpath "$new" "$f"
	done < <(find "$tree" -type f -print0)
	# What is left naming the prefix are libtool's archives and pkg-config.
	find "$tree" -name '*.la' -delete
	rm -rf "$tree/share/doc"
}

# nvml_header: NVIDIA's nvml.h (SLURM_NVML_H), printed.
nvml_header() {
	[ -n "${SLURM_NVML_H:-}" ] && [ -f "$SLURM_NVML_H" ] ||
		die "SLURM_NVML_H names no nvml.h ('${SLURM_NVML_H:-}'): set it to NVIDIA's header (make slurm-src gives go-nvml's)"
	cat "$SLURM_NVML_H"
}

# nvml_stub DIR: DIR/include/nvml.h and DIR/lib64/stubs/libnvidia-ml.so,
# the layout configure's --with-nvml=DIR looks for.
nvml_stub() {
	local d=$1
	rm -rf "$d" && mkdir -p "$d/include" "$d/lib64/stubs"
	nvml_header >"$d/include/nvml.h"
	printf 'int %s(void) { return 0; }\n' nvmlInit nvmlInit_v2 nvmlDeviceSetMemoryLockedClocks |
		${CC:-cc} -shared -fPIC -x c -o "$d/lib64/stubs/libnvidia-ml.so" - ||
		die "could not build the NVML stub for configure"
}

build() {
	local rel=$1 dir=$2 cache=$3 v k tarball src dest prefix t0 t1 t2 t3 rc
	v=$(version_of "$rel")
	k=$(key "$rel")
	tarball=$cache/slurm-$v-$k.tar.zst
	mkdir -p "$(dirname "$dir")"
	if [ -f "$dir/BUILD-INFO" ] && grep -qx "key $k" "$dir/BUILD-INFO"; then
		check "$dir"
		log "$rel: $dir is built ($v, key $k)"
		[ -f "$tarball" ] || "$here/tree-cache.sh" save "$tarball" "$dir" "slurm-$v-*.tar.zst" --exclude=./build.log
		rm -rf "$dir.src"
		return 0
	fi
	t0=$(date +%s)
	if "$here/tree-cache.sh" unpack "$tarball" "$dir"; then
		check "$dir"
		log "$rel: unpacked $tarball in $(($(date +%s) - t0)) s"
		return 0
	fi

	src=$dir.src dest=$dir.destdir prefix=/opt/slurm/$v
	rm -rf "$dir" "$dest"
	rc=0
	"$here/sources.sh" unpack "slurm-$rel" "$src" 2>"$dir.why" || rc=$?
	if [ $rc = 3 ]; then
		mkdir -p "$dir" && mv "$dir.why" "$dir/UNAVAILABLE"
		exit 3
	fi
	cat "$dir.why" >&2 && rm -f "$dir.why"
	[ $rc = 0 ] || exit $rc

	mkdir -p "$dest"
	local logf=$dest.log nvml=$dir.nvml
	nvml_stub "$nvml"
	mapfile -t opts < <(configure_options "$v" | sed "s|@NVML@|$nvml|")
	log "$rel: building $v (configure, make -j$(nproc), make install; log in $dir/build.log)"
	t0=$(date +%s)
	(cd "$src" && ./configure "${opts[@]}") >"$logf" 2>&1 || { tail -n 30 "$logf" >&2; die "$rel: configure failed"; }
	t1=$(date +%s)
	make -C "$src" -j"$(nproc)" >>"$logf" 2>&1 || { tail -n 30 "$logf" >&2; die "$rel: make failed"; }
	t2=$(date +%s)
	make -C "$src" install DESTDIR="$dest" >>"$logf" 2>&1 || { tail -n 30 "$logf" >&2; die "$rel: make install failed"; }
	t3=$(date +%s)
	[ -x "$dest$prefix/sbin/slurmctld" ] || die "$rel: make install put nothing in $dest$prefix"
	mv "$dest$prefix" "$dir.tree"
	relocate "$dir.tree" "$prefix"
	printf 'version %s\nkey %s\nprefix %s\nconfigure_s %s\nmake_s %s\ninstall_s %s\nmake_jobs %s\n' \
		"$v" "$k" "$prefix" $((t1 - t0)) $((t2 - t1)) $((t3 - t2)) "$(nproc)" >"$dir.tree/BUILD-INFO"
	mv "$logf" "$dir.tree/build.log"
	rm -rf "$dir" "$dest" "$nvml" && mv "$dir.tree" "$dir"
	check "$dir"
	log "$rel: built $v: configure $((t1 - t0)) s, make $((t2 - t1)) s, install $((t3 - t2)) s"
	"$here/tree-cache.sh" save "$tarball" "$dir" "slurm-$v-*.tar.zst" --exclude=./build.log
	rm -rf "$src"
}

case ${1:-} in
build) [ $# = 4 ] || die "usage: $0 build RELEASE DIR CACHE"; build "$2" "$3" "$4" ;;
key) [ $# = 2 ] || die "usage: $0 key RELEASE"; key "$2" ;;
check) [ $# = 2 ] || die "usage: $0 check DIR"; check "$2" ;;
*) die "usage: $0 build RELEASE DIR CACHE | key RELEASE | check DIR" ;;
esac
