package fakecuda

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"testing"
)

// The private tables NVIDIA's runtime asks cuGetExportTable for, the
// context-local storage behind one of them, the driver check and module
// globals (fc_exporttable). The tests in tests/nvidia run NVIDIA's runtime
// itself on them when its packages can be fetched.
func TestExportTables(t *testing.T) {
	n := newNode(t, "80GiB")
	r := n.run(nil, "fc_exporttable")
	checks := r.all("check")
	for _, c := range checks {
		if c["status"] != "ok" {
			t.Errorf("%s failed", c["name"])
		}
	}
	if len(checks) < 30 {
		t.Errorf("only %d checks ran\nstdout:\n%s\nstderr:\n%s", len(checks), r.stdout, r.stderr)
	}
	if r.code != 0 && !t.Failed() {
		t.Errorf("fc_exporttable exited %d\n%s", r.code, r.stderr)
	}

	// The driver check for a runtime version not ending in 0 or 1 is
	// HMAC-MD2 over the process's facts; recompute it independently.
	ev := r.one(t, "integrity")
	u := func(k string) uint64 {
		v, err := strconv.ParseUint(ev[k], 10, 64)
		if err != nil {
			t.Fatalf("integrity %s=%q: %v", k, ev[k], err)
		}
		return v
	}
	i := func(k string) uint32 {
		v, err := strconv.ParseInt(ev[k], 10, 32)
		if err != nil {
			t.Fatalf("integrity %s=%q: %v", k, ev[k], err)
		}
		return uint32(v)
	}
	if u("devices") != 1 {
		t.Fatalf("integrity devices=%s, want 1", ev["devices"])
	}
	msg := make([]byte, 0, 48+28)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(u("driver")))
	msg = binary.LittleEndian.AppendUint32(msg, uint32(u("version")))
	msg = binary.LittleEndian.AppendUint32(msg, uint32(u("pid")))
	msg = binary.LittleEndian.AppendUint32(msg, uint32(u("tid")))
	msg = binary.LittleEndian.AppendUint64(msg, u("runtime_table"))
	msg = binary.LittleEndian.AppendUint64(msg, u("check_table"))
	msg = binary.LittleEndian.AppendUint64(msg, u("check_fn"))
	msg = binary.LittleEndian.AppendUint64(msg, u("seconds"))
	uuid, err := hex.DecodeString(ev["uuid"])
	if err != nil || len(uuid) != 16 {
		t.Fatalf("integrity uuid=%q", ev["uuid"])
	}
	msg = append(msg, uuid...)
	msg = binary.LittleEndian.AppendUint32(msg, i("domain"))
	msg = binary.LittleEndian.AppendUint32(msg, i("bus"))
	msg = binary.LittleEndian.AppendUint32(msg, i("device"))
	key := []byte{0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f}
	want := hmacMD2(key, msg)
	if got0, got1 := u("out0"), u("out1"); got0 != binary.LittleEndian.Uint64(want[:8]) || got1 != binary.LittleEndian.Uint64(want[8:]) {
		t.Errorf("driver check = %016x %016x, want HMAC-MD2 %x", got0, got1, want)
	}
}

func TestMD2KnownAnswers(t *testing.T) {
	// RFC 1319, appendix A.5
	for in, want := range map[string]string{
		"":    "8350e5a3e24c153df2275c9f80692773",
		"abc": "da853b0d3f88d99b30283a69e6ded6bb",
		"12345678901234567890123456789012345678901234567890123456789012345678901234567890": "d5976f79d83d3a0dc9806c3c66f3efd8",
	} {
		if got := md2([]byte(in)); hex.EncodeToString(got[:]) != want {
			t.Errorf("MD2(%q) = %x, want %s", in, got, want)
		}
	}
}

// md2 is RFC 1319's message digest.
func md2(msg []byte) [16]byte {
	var s [256]byte
	copy(s[:], md2Pi)
	pad := 16 - len(msg)%16
	data := append(append([]byte{}, msg...), make([]byte, pad)...)
	for k := len(msg); k < len(data); k++ {
		data[k] = byte(pad)
	}
	var c [16]byte
	var l byte
	for b := 0; b < len(data); b += 16 {
		for j := 0; j < 16; j++ {
			c[j] ^= s[data[b+j]^l]
			l = c[j]
		}
	}
	data = append(data, c[:]...)
	var x [48]byte
	for b := 0; b < len(data); b += 16 {
		for j := 0; j < 16; j++ {
			x[16+j] = data[b+j]
			x[32+j] = x[16+j] ^ x[j]
		}
		var tt byte
		for j := 0; j < 18; j++ {
			for k := 0; k < 48; k++ {
				x[k] ^= s[tt]
				tt = x[k]
			}
			tt += byte(j)
		}
	}
	var out [16]byte
	copy(out[:], x[:16])
	return out
}

// hmacMD2 is RFC 2104's HMAC with MD2 (block size 16).
func hmacMD2(key, msg []byte) [16]byte {
	ipad, opad := make([]byte, 16), make([]byte, 16)
	for k := range key {
		ipad[k], opad[k] = key[k]^0x36, key[k]^0x5c
	}
	inner := md2(append(ipad, msg...))
	return md2(append(opad, inner[:]...))
}

// md2Pi is RFC 1319's permutation of 0..255 built from the digits of pi.
var md2Pi = []byte{
	41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19,
	98, 167, 5, 243, 192, 199, 115, 140, 152, 147, 43, 217, 188, 76, 130, 202,
	30, 155, 87, 60, 253, 212, 224, 22, 103, 66, 111, 24, 138, 23, 229, 18,
	190, 78, 196, 214, 218, 158, 222, 73, 160, 251, 245, 142, 187, 47, 238, 122,
	169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16, 137, 11, 34, 95, 33,
	128, 127, 93, 154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3,
	255, 25, 48, 179, 72, 165, 181, 209, 215, 94, 146, 42, 172, 86, 170, 198,
	79, 184, 56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4, 241,
	69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2,
	27, 96, 37, 173, 174, 176, 185, 246, 28, 70, 97, 105, 52, 64, 126, 15,
	85, 71, 163, 35, 221, 81, 175, 58, 195, 92, 249, 206, 186, 197, 234, 38,
	44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205, 244, 65, 129, 77, 82,
	106, 220, 55, 200, 108, 193, 171, 250, 36, 225, 123, 8, 12, 189, 177, 74,
	120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57,
	242, 239, 183, 14, 102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10,
	49, 68, 80, 180, 143, 237, 31, 26, 219, 153, 141, 51, 159, 17, 131, 20,
}
