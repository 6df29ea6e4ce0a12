package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorMapping serves canned error bodies and checks that every code
// comes back as its sentinel, with the daemon's message.
func TestErrorMapping(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	replies := map[string]struct {
		status int
		body   string
	}{
		"/v1/sessions/nf":   {404, `{"error":"session \"nf\" not found","code":"not_found"}`},
		"/v1/sessions/cf":   {409, `{"error":"exists","code":"conflict"}`},
		"/v1/sessions/qe":   {507, `{"error":"1GiB free on GPU 0","code":"quota_exceeded"}`},
		"/v1/sessions/br":   {400, `{"error":"bad","code":"bad_request"}`},
		"/v1/sessions/ie":   {500, `{"error":"boom","code":"internal"}`},
		"/v1/sessions/junk": {502, `<html>`},
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := replies[r.URL.Path]
		w.WriteHeader(rep.status)
		w.Write([]byte(rep.body))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c := New(sock)
	defer c.Close()
	tests := []struct {
		id   string
		want error
		msg  string
	}{
		{"nf", ErrNotFound, `session "nf" not found`},
		{"cf", ErrConflict, "exists"},
		{"qe", ErrQuotaExceeded, "1GiB free on GPU 0"},
		{"br", ErrBadRequest, "bad"},
		{"ie", ErrInternal, "boom"},
		{"junk", ErrInternal, "HTTP 502"},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			_, err := c.GetSession(context.Background(), tc.id)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("message %q lacks %q", err, tc.msg)
			}
		})
	}
	// A socket nobody listens on is ErrUnavailable.
	_, err = New(filepath.Join(t.TempDir(), "none.sock")).Health(context.Background())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Health without a daemon = %v", err)
	}
}
