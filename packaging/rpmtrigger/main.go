// Command rpmtrigger adds %triggerin/%triggerpostun scriptlets to an .rpm
// that nfpm built (nfpm writes no triggers): the gpuslice package re-selects
// its SPANK plugin when the Slurm package is installed, upgraded or removed.
//
// Usage: rpmtrigger FILE.rpm WHEN:NAME[,NAME...]:SCRIPT ...
//
//	WHEN    in (%triggerin), un (%triggerun) or postun (%triggerpostun)
//	NAME    the package names that fire it (slurm, slurm-ohpc)
//	SCRIPT  a /bin/sh script file
//
// The main header gets the trigger tags rpmbuild writes for
// "%triggerin -- slurm, slurm-ohpc" (TRIGGERSCRIPTS, TRIGGERSCRIPTPROG,
// TRIGGERNAME, TRIGGERVERSION, TRIGGERFLAGS, TRIGGERINDEX), inside its
// immutable region; the signature header's size and digests of the header
// are computed again (the payload is unchanged). A signed package is
// refused: add triggers before signing. FILE is replaced in one rename.
package main

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Header entry types and the tags used here (rpm's rpmtag.h, rpmds.h).
const (
	typeNull        = 0
	typeChar        = 1
	typeInt8        = 2
	typeInt16       = 3
	typeInt32       = 4
	typeInt64       = 5
	typeString      = 6
	typeBin         = 7
	typeStringArray = 8
	typeI18NString  = 9

	tagSignatures = 62
	tagImmutable  = 63

	tagTriggerScripts    = 1065
	tagTriggerName       = 1066
	tagTriggerVersion    = 1067
	tagTriggerFlags      = 1068
	tagTriggerIndex      = 1069
	tagTriggerScriptProg = 1092

	sigDSA    = 267
	sigRSA    = 268
	sigSHA1   = 269
	sigSHA256 = 273
	sigSize   = 1000
	sigPGP    = 1002
	sigMD5    = 1004
	sigGPG    = 1005

	senseTriggerIn     = 1 << 16
	senseTriggerUn     = 1 << 17
	senseTriggerPostun = 1 << 18
)

var magic = []byte{0x8e, 0xad, 0xe8, 0x01, 0, 0, 0, 0}

const leadSize = 96

type entry struct {
	tag, typ, count int32
	data            []byte
}

// header is one header structure: its entries (without the region entry)
// and the tag of its region (62 or 63).
type header struct {
	region  int32
	entries []entry
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: rpmtrigger FILE.rpm WHEN:NAME[,NAME...]:SCRIPT ...")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "rpmtrigger: %v\n", err)
		os.Exit(1)
	}
}

type trigger struct {
	flag   int32
	names  []string
	script string
}

func parseTrigger(arg string) (trigger, error) {
	parts := strings.SplitN(arg, ":", 3)
	if len(parts) != 3 || parts[1] == "" {
		return trigger{}, fmt.Errorf("%q: want WHEN:NAME[,NAME...]:SCRIPT", arg)
	}
	var t trigger
	switch parts[0] {
	case "in":
		t.flag = senseTriggerIn
	case "un":
		t.flag = senseTriggerUn
	case "postun":
		t.flag = senseTriggerPostun
	default:
		return t, fmt.Errorf("%q: WHEN %q is not in, un or postun", arg, parts[0])
	}
	t.names = strings.Split(parts[1], ",")
	b, err := os.ReadFile(parts[2])
	if err != nil {
		return t, err
	}
	t.script = strings.TrimRight(string(b), "\n")
	return t, nil
}

func run(path string, args []string) error {
	var triggers []trigger
	for _, a := range args {
		t, err := parseTrigger(a)
		if err != nil {
			return err
		}
		triggers = append(triggers, t)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := addTriggers(b, triggers)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".rpmtrigger-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func addTriggers(b []byte, triggers []trigger) ([]byte, error) {
	if len(b) < leadSize || !bytes.Equal(b[:4], []byte{0xed, 0xab, 0xee, 0xdb}) {
		return nil, errors.New("not an rpm package (no lead)")
	}
	sig, n, err := readHeader(b[leadSize:])
	if err != nil {
		return nil, fmt.Errorf("signature header: %w", err)
	}
	hoff := leadSize + (n+7)/8*8
	hdr, n, err := readHeader(b[hoff:])
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	payload := b[hoff+n:]
	if sig.region != tagSignatures || hdr.region != tagImmutable {
		return nil, fmt.Errorf("regions %d and %d, want %d and %d", sig.region, hdr.region, tagSignatures, tagImmutable)
	}
	for _, e := range sig.entries {
		switch e.tag {
		case sigDSA, sigRSA, sigPGP, sigGPG:
			return nil, errors.New("the package is signed: add triggers before signing it")
		}
	}
	for _, e := range hdr.entries {
		if e.tag >= tagTriggerScripts && e.tag <= tagTriggerIndex || e.tag == tagTriggerScriptProg {
			return nil, errors.New("the package already has triggers")
		}
	}

	// As rpmbuild: one script (and interpreter) per trigger; one
	// name/version/flags/index row per package name.
	var scripts, progs, names, versions []string
	var flags, index []int32
	for i, t := range triggers {
		scripts = append(scripts, t.script)
		progs = append(progs, "/bin/sh")
		for _, n := range t.names {
			names = append(names, n)
			versions = append(versions, "")
			flags = append(flags, t.flag)
			index = append(index, int32(i))
		}
	}
	hdr.entries = append(hdr.entries,
		stringArray(tagTriggerScripts, scripts),
		stringArray(tagTriggerName, names),
		stringArray(tagTriggerVersion, versions),
		int32s(tagTriggerFlags, flags),
		int32s(tagTriggerIndex, index),
		stringArray(tagTriggerScriptProg, progs),
	)
	hb := hdr.bytes()

	sum256 := sha256.Sum256(hb)
	sum1 := sha1.Sum(hb)
	md := md5.New()
	md.Write(hb)
	md.Write(payload)
	for i, e := range sig.entries {
		switch e.tag {
		case sigSize:
			sig.entries[i] = int32s(sigSize, []int32{int32(len(hb) + len(payload))})
		case sigSHA256:
			sig.entries[i] = str(sigSHA256, hex.EncodeToString(sum256[:]))
		case sigSHA1:
			sig.entries[i] = str(sigSHA1, hex.EncodeToString(sum1[:]))
		case sigMD5:
			sig.entries[i] = entry{tag: sigMD5, typ: typeBin, count: 16, data: md.Sum(nil)}
		}
	}
	sb := sig.bytes()
	out := slices.Clone(b[:leadSize])
	out = append(out, sb...)
	out = append(out, make([]byte, (8-len(sb)%8)%8)...)
	out = append(out, hb...)
	return append(out, payload...), nil
}

func stringArray(tag int32, v []string) entry {
	var b []byte
	for _, s := range v {
		b = append(append(b, s...), 0)
	}
	return entry{tag: tag, typ: typeStringArray, count: int32(len(v)), data: b}
}

func str(tag int32, s string) entry {
	return entry{tag: tag, typ: typeString, count: 1, data: append([]byte(s), 0)}
}

func int32s(tag int32, v []int32) entry {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.BigEndian.PutUint32(b[4*i:], uint32(x))
	}
	return entry{tag: tag, typ: typeInt32, count: int32(len(v)), data: b}
}

// readHeader parses a header structure whose entries all lie in one region
// (what rpmbuild and nfpm write); it returns the bytes it spans.
func readHeader(b []byte) (header, int, error) {
	var h header
	if len(b) < 16 || !bytes.Equal(b[:8], magic) {
		return h, 0, errors.New("bad magic")
	}
	il := int(binary.BigEndian.Uint32(b[8:]))
	dl := int(binary.BigEndian.Uint32(b[12:]))
	if il < 1 || il > 1<<16 || dl > 1<<28 || len(b) < 16+16*il+dl {
		return h, 0, fmt.Errorf("%d entries, %d data bytes: truncated or corrupt", il, dl)
	}
	data := b[16+16*il : 16+16*il+dl]
	for i := 0; i < il; i++ {
		r := b[16+16*i:]
		e := entry{tag: int32(binary.BigEndian.Uint32(r)), typ: int32(binary.BigEndian.Uint32(r[4:])),
			count: int32(binary.BigEndian.Uint32(r[12:]))}
		off := int(int32(binary.BigEndian.Uint32(r[8:])))
		if i == 0 {
			if (e.tag != tagSignatures && e.tag != tagImmutable) || e.typ != typeBin || e.count != 16 || off != dl-16 {
				return h, 0, fmt.Errorf("first entry (tag %d) is not a region covering the header", e.tag)
			}
			trailer := data[off:]
			if int32(binary.BigEndian.Uint32(trailer[8:])) != int32(-16*il) {
				return h, 0, errors.New("the region does not hold every entry")
			}
			h.region = e.tag
			continue
		}
		size, err := dataSize(e, data, off)
		if err != nil {
			return h, 0, fmt.Errorf("tag %d: %w", e.tag, err)
		}
		e.data = slices.Clone(data[off : off+size])
		h.entries = append(h.entries, e)
	}
	return h, 16 + 16*il + dl, nil
}

func dataSize(e entry, data []byte, off int) (int, error) {
	if off < 0 || off > len(data) || e.count < 0 {
		return 0, errors.New("offset out of range")
	}
	n := int(e.count)
	size := 0
	switch e.typ {
	case typeNull:
	case typeChar, typeInt8, typeBin:
		size = n
	case typeInt16:
		size = 2 * n
	case typeInt32:
		size = 4 * n
	case typeInt64:
		size = 8 * n
	case typeString, typeStringArray, typeI18NString:
		if e.typ == typeString {
			n = 1
		}
		for ; n > 0; n-- {
			i := bytes.IndexByte(data[off+size:], 0)
			if i < 0 {
				return 0, errors.New("unterminated string")
			}
			size += i + 1
		}
	default:
		return 0, fmt.Errorf("unknown type %d", e.typ)
	}
	if off+size > len(data) {
		return 0, errors.New("data out of range")
	}
	return size, nil
}

// bytes writes the header as rpm does: entries sorted by tag after the
// region entry, integers aligned, the region trailer last.
func (h header) bytes() []byte {
	es := slices.Clone(h.entries)
	slices.SortStableFunc(es, func(a, b entry) int { return int(a.tag) - int(b.tag) })
	var data []byte
	offs := make([]int, len(es))
	for i, e := range es {
		align := map[int32]int{typeInt16: 2, typeInt32: 4, typeInt64: 8}[e.typ]
		for align > 0 && len(data)%align != 0 {
			data = append(data, 0)
		}
		offs[i] = len(data)
		data = append(data, e.data...)
	}
	il := len(es) + 1
	trailer := make([]byte, 16)
	binary.BigEndian.PutUint32(trailer, uint32(h.region))
	binary.BigEndian.PutUint32(trailer[4:], typeBin)
	binary.BigEndian.PutUint32(trailer[8:], uint32(int32(-16*il)))
	binary.BigEndian.PutUint32(trailer[12:], 16)
	data = append(data, trailer...)

	out := slices.Clone(magic)
	out = binary.BigEndian.AppendUint32(out, uint32(il))
	out = binary.BigEndian.AppendUint32(out, uint32(len(data)))
	put := func(tag, typ int32, off int, count int32) {
		for _, v := range []uint32{uint32(tag), uint32(typ), uint32(int32(off)), uint32(count)} {
			out = binary.BigEndian.AppendUint32(out, v)
		}
	}
	put(h.region, typeBin, len(data)-16, 16)
	for i, e := range es {
		put(e.tag, e.typ, offs[i], e.count)
	}
	return append(out, data...)
}
