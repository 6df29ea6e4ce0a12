package ipc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func header(magic uint32, version, typ uint16, n uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, magic)
	b = binary.LittleEndian.AppendUint16(b, version)
	b = binary.LittleEndian.AppendUint16(b, typ)
	return binary.LittleEndian.AppendUint32(b, n)
}

func str(s string) []byte {
	return append(binary.LittleEndian.AppendUint16(nil, uint16(len(s))), s...)
}

func TestRequestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		req  Request
	}{
		{"ping empty", Request{Type: TypePing, Ping: []byte{}}},
		{"ping 64", Request{Type: TypePing, Ping: bytes.Repeat([]byte{7}, MaxPing)}},
		{"attach", Request{Type: TypeAttach, Session: []byte("1234"), Token: []byte{}}},
		{"attach token", Request{Type: TypeAttach, Session: []byte(strings.Repeat("s", 63)), Token: bytes.Repeat([]byte("t"), 256)}},
		{"attach compute", Request{Type: TypeAttach, Session: []byte("1234"), Token: []byte{}, Flags: AttachCompute}},
		{"detach", Request{Type: TypeDetach, Slot: 255}},
		{"status", Request{Type: TypeStatus, Session: []byte("job.1_a-b")}},
		{"status token", Request{Type: TypeStatus, Session: []byte("j"), Token: []byte("secret")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := AppendRequest(nil, tc.req)
			buf := make([]byte, HeaderSize+MaxPayload)
			typ, p, err := ReadFrame(bytes.NewReader(frame), buf)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseRequest(typ, p)
			if err != nil {
				t.Fatal(err)
			}
			if got.Type != tc.req.Type || !bytes.Equal(got.Ping, tc.req.Ping) || !bytes.Equal(got.Session, tc.req.Session) ||
				!bytes.Equal(got.Token, tc.req.Token) || got.Slot != tc.req.Slot || got.Flags != tc.req.Flags {
				t.Fatalf("got %+v, want %+v", got, tc.req)
			}
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		resp Response
	}{
		{"pong", Response{Type: TypePong, Pong: []byte("abc")}},
		{"attach ok", Response{Type: TypeAttachOK, Slot: 3, NGPUs: 2, Generation: 1 << 40}},
		{"attach ok compute", Response{Type: TypeAttachOK, Slot: 3, NGPUs: 2, Generation: 7, Compute: true, ComputeSlot: 4095, ComputeGen: 1 << 33}},
		{"ok", Response{Type: TypeOK}},
		{"status ok", Response{Type: TypeStatusOK, Status: []byte(`{"id":"x"}`)}},
		{"error", Response{Type: TypeError, Code: CodeNotPermitted, Message: []byte("no")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := AppendResponse(nil, tc.resp)
			h, err := ParseHeader(frame)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseResponse(h.Type, frame[HeaderSize:])
			if err != nil {
				t.Fatal(err)
			}
			if got.Type != tc.resp.Type || got.Slot != tc.resp.Slot || got.NGPUs != tc.resp.NGPUs ||
				got.Generation != tc.resp.Generation || got.Code != tc.resp.Code ||
				!bytes.Equal(got.Message, tc.resp.Message) || !bytes.Equal(got.Status, tc.resp.Status) ||
				!bytes.Equal(got.Pong, tc.resp.Pong) || got.Compute != tc.resp.Compute ||
				got.ComputeSlot != tc.resp.ComputeSlot || got.ComputeGen != tc.resp.ComputeGen {
				t.Fatalf("got %+v, want %+v", got, tc.resp)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	tests := []struct {
		name    string
		frame   []byte
		wantErr error
	}{
		{"bad magic", header(0x12345678, 1, 1, 0), ErrMalformed},
		{"version 2", header(Magic, 2, 1, 0), ErrVersion},
		{"version 0", header(Magic, 0, 1, 0), ErrVersion},
		{"type 0", header(Magic, 1, 0, 0), ErrMalformed},
		{"type 10", header(Magic, 1, 10, 0), ErrMalformed},
		{"length over max", header(Magic, 1, 1, MaxPayload+1), ErrMalformed},
		{"short header", header(Magic, 1, 1, 0)[:7], io.ErrUnexpectedEOF},
		{"truncated payload", append(header(Magic, 1, 1, 10), 1, 2, 3), io.ErrUnexpectedEOF},
		{"ping too long", append(header(Magic, 1, 1, 65), make([]byte, 65)...), ErrMalformed},
		{"status empty session", append(header(Magic, 1, 7, 2), str("")...), ErrMalformed},
		{"attach session 64", append(header(Magic, 1, 3, 68), append(str(strings.Repeat("a", 64)), str("")...)...), ErrMalformed},
		{"attach no token", append(header(Magic, 1, 3, 3), str("a")...), ErrMalformed},
		{"attach trailing", append(header(Magic, 1, 3, 6), append(append(str("a"), str("")...), 0)...), ErrMalformed},
		{"attach string past end", append(header(Magic, 1, 3, 4), 9, 0, 'a', 'b'), ErrMalformed},
		{"attach flags zero", append(header(Magic, 1, 3, 8), append(append(str(""), str("")...), 0, 0, 0, 0)...), ErrMalformed},
		{"attach unknown flag", append(header(Magic, 1, 3, 8), append(append(str(""), str("")...), 2, 0, 0, 0)...), ErrMalformed},
		{"attach flags short", append(header(Magic, 1, 3, 7), append(append(str(""), str("")...), 1, 0, 0)...), ErrMalformed},
		{"attach token 257", append(header(Magic, 1, 3, 3+2+257), append(str("a"), str(strings.Repeat("t", 257))...)...), ErrMalformed},
		{"detach short", append(header(Magic, 1, 5, 3), 1, 2, 3), ErrMalformed},
		{"detach long", append(header(Magic, 1, 5, 5), 1, 2, 3, 4, 5), ErrMalformed},
		{"status trailing", append(header(Magic, 1, 7, 4), append(str("a"), 0)...), ErrMalformed},
		{"response type as request", header(Magic, 1, uint16(TypeOK), 0), ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, HeaderSize+MaxPayload)
			typ, p, err := ReadFrame(bytes.NewReader(tc.frame), buf)
			if err == nil {
				_, err = ParseRequest(typ, p)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// FuzzFrame feeds arbitrary bytes to the frame reader and both payload
// parsers. It must never panic, and whatever parses must re-encode to the
// very bytes it came from (the parsers are exact).
func FuzzFrame(f *testing.F) {
	f.Add(AppendRequest(nil, Request{Type: TypePing, Ping: []byte("hi")}))
	f.Add(AppendRequest(nil, Request{Type: TypeAttach, Session: []byte("1234"), Token: []byte("tok")}))
	f.Add(AppendRequest(nil, Request{Type: TypeShort, GPU: []byte("GPU-0fb77ae2-cd90-4869-996b-d2ca1bdef09b")}))
	f.Add(AppendResponse(nil, Response{Type: TypeError, Code: 2, Message: []byte("unknown session")}))
	buf := make([]byte, HeaderSize+MaxPayload)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		off := 0
		for {
			typ, p, err := ReadFrame(r, buf)
			if err != nil {
				return
			}
			orig := data[off : off+HeaderSize+len(p)]
			off += HeaderSize + len(p)
			if len(p) > MaxPayload {
				t.Fatalf("payload of %d bytes accepted", len(p))
			}
			if req, err := ParseRequest(typ, p); err == nil {
				if len(req.Session) > MaxSession || len(req.Token) > MaxToken || len(req.Ping) > MaxPing || len(req.GPU) > MaxGPUName {
					t.Fatalf("request over its limits accepted: %+v", req)
				}
				if again := AppendRequest(nil, req); !bytes.Equal(again, orig) {
					t.Fatalf("request %+v re-encodes to %x, came from %x", req, again, orig)
				}
			}
			if resp, err := ParseResponse(typ, p); err == nil {
				if again := AppendResponse(nil, resp); !bytes.Equal(again, orig) {
					t.Fatalf("response %+v re-encodes to %x, came from %x", resp, again, orig)
				}
			}
		}
	})
}
