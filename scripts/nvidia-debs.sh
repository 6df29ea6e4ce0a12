#!/usr/bin/env bash
# nvidia-debs.sh DIR CACHE SUITE "PKGS" "HDR_PKGS": NVIDIA's packages from
# Debian's main, contrib and non-free, unpacked into DIR/root with a private
# apt configuration under DIR/apt (the machine's sources are untouched).
# PKGS are unpacked whole; of HDR_PKGS only usr/include is kept.
#
# The unpacked root is kept in CACHE as one tarball, keyed by the files the
# archive serves today (names and SHA256, from apt's index) and by this
# script: a fresh clone on the same machine unpacks it instead of fetching
# and unpacking a gigabyte again, and a new package version or a change
# here fetches afresh.
#
# Exits 3, with apt's message in DIR/UNREACHABLE, when the archive cannot be
# reached.
set -euo pipefail
dir=$1 cache=$2 suite=$3
read -ra pkgs <<<"$4"
read -ra hdr_pkgs <<<"$5"
root=$dir/root
apt_opts=(-o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache" -o APT::Sandbox::User=root)

log() { echo "nvidia-debs: $*"; }
unreachable() {
	printf 'Debian contrib/non-free archive unreachable: %s\n' "$1" | head -c 2000 >"$dir/UNREACHABLE"
	exit 3
}

mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial"
echo "deb http://deb.debian.org/debian $suite main contrib non-free" >"$dir/apt/sources.list"
out=$(apt-get -qq "${apt_opts[@]}" update 2>&1) || unreachable "$out"
# One line per file: 'URL' NAME SIZE SHA256:...
uris=$(apt-get -qq "${apt_opts[@]}" --print-uris download "${pkgs[@]}" "${hdr_pkgs[@]}" 2>&1) || unreachable "$uris"
key=$({ awk '{print $2, $4}' <<<"$uris"; echo "hdr: ${hdr_pkgs[*]}"; cat "$0"; } | sha256sum | cut -c1-16)
tarball=$cache/nvidia-root-$key.tar.zst

here=$(dirname "$0")
if "$here/tree-cache.sh" unpack "$tarball" "$root"; then
	log "unpacked cached $tarball"
	exit 0
fi
rm -rf "$root" "$root.tmp"
mkdir -p "$root.tmp"

log "fetching ${pkgs[*]} ${hdr_pkgs[*]}"
mkdir -p "$dir/debs"
out=$(cd "$dir/debs" && apt-get -qq "${apt_opts[@]}" download "${pkgs[@]}" "${hdr_pkgs[@]}" 2>&1) || unreachable "$out"
for p in "${pkgs[@]}"; do
	dpkg-deb -x "$dir/debs/${p}"_*.deb "$root.tmp"
done
for p in "${hdr_pkgs[@]}"; do
	dpkg-deb --fsys-tarfile "$dir/debs/${p}"_*.deb | tar -x -C "$root.tmp" ./usr/include
done
rm -rf "$dir/debs"
# The programs run on fakecuda's driver and NVML, never NVIDIA's.
if find "$root.tmp" -name 'libcuda.so*' -o -name 'libnvidia-ml.so*' | grep -q .; then
	echo "nvidia-debs: a real libcuda/NVML was unpacked" >&2
	exit 1
fi
log "saving $tarball"
"$here/tree-cache.sh" save "$tarball" "$root.tmp" 'nvidia-root-*.tar.zst'
mv "$root.tmp" "$root"
