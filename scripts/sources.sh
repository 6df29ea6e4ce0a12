#!/bin/bash
# sources.sh: the source trees of the third-party projects the suites build
# (SchedMD's Slurm releases, enroot, pyxis, Apptainer), at the versions
# pinned in mk/sources.txt, found in this order:
#
#   1. the machine's cache, GPUSLICE_CACHE/sources (what an earlier run
#      downloaded);
#   2. a directory of archives, GPUSLICE_SOURCES (default: shared/third_party
#      in the checkout's parent directory, when it exists), each checked
#      against that directory's SHA256SUMS and against the pinned checksum;
#   3. the project's public URL at the pinned tag or commit (curl or wget),
#      kept in the cache once its contents are checked;
#   4. none: exit status 3 and one line naming what is missing.
#
#   sources.sh unpack NAME DIR   DIR is replaced by NAME's source tree (the
#                                archive's one top folder); says on stderr
#                                where it came from
#   sources.sh have NAME         exit status 0 when NAME is in the cache or in
#                                GPUSLICE_SOURCES (no download), else 1 and
#                                one line naming what is missing
#   sources.sh field NAME FIELD  one column of NAME's row in mk/sources.txt:
#                                version, archive, sha256, content or url
#   sources.sh names [PREFIX]    the names in mk/sources.txt
#   sources.sh sum DIR           the content checksum of a source tree (the
#                                table's content column)
#
# GPUSLICE_SOURCES_TABLE names another table (the tests' own).
#
# The content checksum covers each file's path, SHA-256 and executable bit
# and each link's target, not the archive's compression, timestamps or top
# folder's name: an archive made by `git archive` of the pinned tag or
# commit and the one the project's host serves for it have the same.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
table=${GPUSLICE_SOURCES_TABLE:-$repo/mk/sources.txt}
cache=${GPUSLICE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuslice}/sources
if [ -z "${GPUSLICE_SOURCES:-}" ] && [ -d "$repo/../shared/third_party" ]; then
	GPUSLICE_SOURCES=$(cd "$repo/../shared/third_party" && pwd)
fi
sources=${GPUSLICE_SOURCES:-}

log() { printf 'sources: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# row NAME: NAME's line of the table, or die.
row() {
	local r
	r=$(awk -v n="$1" '$1 == n' "$table")
	[ -n "$r" ] || die "$1: not in $table"
	printf '%s\n' "$r"
}

field() {
	local r col
	r=$(row "$1")
	case $2 in
	version) col=2 ;; archive) col=3 ;; sha256) col=4 ;; content) col=5 ;; url) col=6 ;;
	*) die "no column '$2' (version, archive, sha256, content, url)" ;;
	esac
	awk -v c="$col" '{print $c}' <<<"$r"
}

content_sum() {
	(
		cd "$1"
		find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
		find . -type l -printf 'link %p %l\n' | LC_ALL=C sort
		find . -type f -perm /111 -printf 'exec %p\n' | LC_ALL=C sort
	) | sha256sum | cut -d' ' -f1
}

# extract ARCHIVE DIR: DIR replaced by the archive's one top folder.
extract() {
	local archive=$1 dir=$2 tmp top
	tmp=$dir.unpack
	rm -rf "$tmp"
	mkdir -p "$tmp"
	if ! tar -xf "$archive" -C "$tmp" --no-same-owner; then
		rm -rf "$tmp"
		return 1
	fi
	top=$(find "$tmp" -mindepth 1 -maxdepth 1)
	if [ "$(printf '%s\n' "$top" | wc -l)" != 1 ] || [ ! -d "$top" ]; then
		log "$archive holds more than one top folder"
		rm -rf "$tmp"
		return 1
	fi
	rm -rf "$dir"
	mv "$top" "$dir"
	rmdir "$tmp"
}

# from_sources NAME: the archive in GPUSLICE_SOURCES, checked. Status 1
# when it is not there; 2, with the reason on stderr, when it is there but
# is not the pinned archive (never passed over for another source).
from_sources() {
	local archive want listed got
	archive=$(field "$1" archive)
	[ -n "$sources" ] && [ -f "$sources/$archive" ] || return 1
	want=$(field "$1" sha256)
	listed=$(awk -v a="$archive" '$2 == a || $2 == "*" a {print $1}' "$sources/SHA256SUMS" 2>/dev/null || true)
	got=$(sha256sum "$sources/$archive" | cut -d' ' -f1)
	if [ -z "$listed" ]; then
		log "$sources/$archive is not listed in $sources/SHA256SUMS"
		return 2
	elif [ "$got" != "$listed" ]; then
		log "$sources/$archive: SHA-256 $got, $sources/SHA256SUMS says $listed (a damaged copy?)"
		return 2
	elif [ "$got" != "$want" ]; then
		log "$sources/$archive: SHA-256 $got is not the pinned $want (mk/sources.txt)"
		return 2
	fi
	printf '%s\n' "$sources/$archive"
}

# cached NAME: the archive in the cache, or status 1.
cached() {
	local f
	f=$cache/$(field "$1" archive)
	[ -f "$f" ] || return 1
	printf '%s\n' "$f"
}

# check_tree NAME DIR ARCHIVE: DIR holds the pinned contents (an archive
# whose bytes are the pinned ones needs no more).
check_tree() {
	local got
	[ "$(sha256sum "$3" | cut -d' ' -f1)" = "$(field "$1" sha256)" ] && return 0
	got=$(content_sum "$2")
	[ "$got" = "$(field "$1" content)" ] && return 0
	log "$3: its contents (checksum $got) are not the pinned $(field "$1" content)"
	return 1
}

download() {
	local url=$1 out=$2
	if command -v curl >/dev/null; then
		curl -fsSL --connect-timeout 20 --retry 2 -o "$out" "$url"
	elif command -v wget >/dev/null; then
		wget -q -T 20 -t 3 -O "$out" "$url"
	else
		echo "neither curl nor wget is installed" >&2
		return 1
	fi
}

unpack() {
	local name=$1 dir=$2 a url tmp err rc
	field "$name" version >/dev/null
	mkdir -p "$(dirname "$dir")"
	if a=$(cached "$name"); then
		if extract "$a" "$dir" && check_tree "$name" "$dir" "$a"; then
			log "$name: from the cache ($a)"
			return 0
		fi
		log "$name: removing $a, which does not hold the pinned source"
		rm -rf "$a" "$dir"
	fi
	rc=0
	a=$(from_sources "$name") || rc=$?
	[ $rc != 2 ] || exit 1
	if [ $rc = 0 ]; then
		extract "$a" "$dir" || die "$a cannot be unpacked"
		log "$name: from GPUSLICE_SOURCES ($a)"
		return 0
	fi
	url=$(field "$name" url)
	mkdir -p "$cache"
	tmp=$cache/$(field "$name" archive).download.$$
	if err=$(download "$url" "$tmp" 2>&1); then
		if extract "$tmp" "$dir" && check_tree "$name" "$dir" "$tmp"; then
			mv "$tmp" "$cache/$(field "$name" archive)"
			log "$name: downloaded $url"
			return 0
		fi
		rm -rf "$tmp" "$dir"
		die "$name: $url does not hold the pinned source"
	fi
	rm -f "$tmp"
	printf '%s: no source: not in %s, %s, and %s could not be fetched (%s)\n' "$name" "$cache" \
		"${sources:-GPUSLICE_SOURCES (unset)}" "$url" "$(printf '%s\n' "$err" | tail -n 1 | cut -c1-200)" >&2
	exit 3
}

have() {
	local rc=0
	cached "$1" >/dev/null && return 0
	from_sources "$1" >/dev/null || rc=$?
	[ $rc != 0 ] || return 0
	[ $rc != 2 ] || return 1
	printf '%s: no source here: %s is neither in %s nor in %s\n' "$1" "$(field "$1" archive)" "$cache" \
		"${sources:-GPUSLICE_SOURCES (unset)}" >&2
	return 1
}

case ${1:-} in
unpack) [ $# = 3 ] || die "usage: $0 unpack NAME DIR"; unpack "$2" "$3" ;;
have) [ $# = 2 ] || die "usage: $0 have NAME"; have "$2" ;;
field) [ $# = 3 ] || die "usage: $0 field NAME FIELD"; field "$2" "$3" ;;
names) awk -v p="${2:-}" '!/^#/ && NF && index($1, p) == 1 {print $1}' "$table" ;;
sum) [ $# = 2 ] || die "usage: $0 sum DIR"; content_sum "$2" ;;
*) die "usage: $0 unpack NAME DIR | have NAME | field NAME FIELD | names [PREFIX] | sum DIR" ;;
esac
