package ipc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func viewPayload(op uint16, off uint32, session string) []byte {
	p := binary.LittleEndian.AppendUint16(nil, op)
	p = binary.LittleEndian.AppendUint32(p, off)
	return append(p, str(session)...)
}

func TestViewRequest(t *testing.T) {
	good := []Request{
		{Type: TypeView, Session: []byte{}, View: View{Op: ViewStatus}},
		{Type: TypeView, Session: []byte("1234"), View: View{Op: ViewStatus}},
		{Type: TypeView, Session: []byte(strings.Repeat("j", MaxSession)), View: View{Op: ViewReport}},
		{Type: TypeView, Session: []byte{}, View: View{Op: ViewLive, Offset: 1 << 31}},
		{Type: TypeView, Session: []byte{}, View: View{Op: ViewFinished, Offset: 7}},
		{Type: TypeView, Session: []byte{}, View: View{Op: ViewGPUs}},
	}
	for _, req := range good {
		t.Run(req.View.Op.String(), func(t *testing.T) {
			frame := AppendRequest(nil, req)
			buf := make([]byte, HeaderSize+MaxPayload)
			typ, p, err := ReadFrame(bytes.NewReader(frame), buf)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseRequest(typ, p)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, req) {
				t.Fatalf("got %+v, want %+v", got, req)
			}
		})
	}
	bad := []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"op only", []byte{1, 0}},
		{"op 0", viewPayload(0, 0, "")},
		{"op 6", viewPayload(6, 0, "")},
		{"no session", viewPayload(1, 0, "")[:6]},
		{"session 64", viewPayload(2, 0, strings.Repeat("a", 64))},
		{"session past end", append(viewPayload(2, 0, "")[:6], 5, 0, 'a')},
		{"trailing", append(viewPayload(3, 0, ""), 0)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseRequest(TypeView, tc.p); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
	// VIEW_OK carries a JSON document, as STATUS_OK.
	resp, err := ParseResponse(TypeViewOK, []byte(`{"gpus":[]}`))
	if err != nil || string(resp.Status) != `{"gpus":[]}` {
		t.Fatalf("VIEW_OK: %+v, %v", resp, err)
	}
	if _, err := ParseResponse(TypeView, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("VIEW as a response: %v", err)
	}
	if _, err := ParseRequest(TypeViewOK, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("VIEW_OK as a request: %v", err)
	}
}

// TestViewFuzzSeeds: the committed seed corpus holds VIEW frames, good
// and bad, so plain `go test` exercises them through FuzzFrame.
func TestViewFuzzSeeds(t *testing.T) {
	for _, name := range []string{"view_status", "view_status_empty", "view_list_offset", "view_ok", "view_bad_op", "view_trailing", "view_session_64"} {
		if _, err := os.Stat(filepath.Join("testdata", "fuzz", "FuzzFrame", name)); err != nil {
			t.Errorf("seed %s: %v", name, err)
		}
	}
}
