// Package client is the Go client of gpusliced's admin API (docs/api.md):
// HTTP over the root-only unix socket. The CLI and the Slurm Prolog/Epilog
// use it and nothing else.
//
//	c := client.New("/run/gpuslice/admin.sock")
//	s, err := c.CreateSession(ctx, client.SessionRequest{ID: "1234", UID: 1000, QuotaBytes: 8 << 30})
//	if errors.Is(err, client.ErrQuotaExceeded) { ... }
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// DefaultSocket is the admin socket's default path.
const DefaultSocket = "/run/gpuslice/admin.sock"

// Wire types, re-exported so callers need only this package.
type (
	SessionRequest = api.SessionRequest
	PatchRequest   = api.PatchRequest
	Session        = api.Session
	SessionGPU     = api.SessionGPU
	Process        = api.Process
	Report         = api.Report
	ReportGPU      = api.ReportGPU
	GPU            = api.GPU
	Health         = api.Health
)

// Sentinel errors: test with errors.Is.
var (
	ErrNotFound      = api.ErrNotFound
	ErrConflict      = api.ErrConflict
	ErrQuotaExceeded = api.ErrQuotaExceeded
	ErrBadRequest    = api.ErrBadRequest
	ErrUnavailable   = api.ErrUnavailable // the daemon could not be reached
	ErrInternal      = api.ErrInternal
)

// Error is an error answered by the daemon. It unwraps to a sentinel.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel for the code.
func (e *Error) Unwrap() error { return api.FromCode(e.Code) }

// Client talks to one daemon. Safe for concurrent use.
type Client struct {
	sock string
	hc   *http.Client
}

// New returns a client for the admin socket at sockPath.
func New(sockPath string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sockPath)
		},
		MaxIdleConns:        4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		TLSHandshakeTimeout: 0,
	}
	return &Client{sock: sockPath, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// Socket is the admin socket path.
func (c *Client) Socket() string { return c.sock }

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://gpusliced"+path, body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, c.sock, unwrapURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%w: read reply: %v", ErrUnavailable, err)
	}
	if resp.StatusCode >= 300 {
		var eb api.ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error == "" {
			eb = api.ErrorBody{Error: fmt.Sprintf("%s %s: HTTP %d", method, path, resp.StatusCode), Code: api.CodeInternal}
		}
		return &Error{Status: resp.StatusCode, Code: eb.Code, Message: eb.Error}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode %s %s reply: %w", method, path, err)
		}
	}
	return nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

// CreateSession creates a session, or returns the existing one when the
// same id already exists with the same owner and quotas (idempotent).
func (c *Client) CreateSession(ctx context.Context, req SessionRequest) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodPost, "/v1/sessions", req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GetSession returns a live session.
func (c *Client) GetSession(ctx context.Context, id string) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodGet, sessionPath(id), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSessions returns every live session.
func (c *Client) ListSessions(ctx context.Context) ([]Session, error) {
	var s []Session
	if err := c.do(ctx, http.MethodGet, "/v1/sessions", nil, &s); err != nil {
		return nil, err
	}
	return s, nil
}

// PatchSession changes quotas and/or TTL of a live session.
func (c *Client) PatchSession(ctx context.Context, id string, req PatchRequest) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodPatch, sessionPath(id), req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSession releases a session and returns its final report.
func (c *Client) DeleteSession(ctx context.Context, id string) (*Report, error) {
	var r Report
	if err := c.do(ctx, http.MethodDelete, sessionPath(id), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// History returns the report of a released session.
func (c *Client) History(ctx context.Context, id string) (*Report, error) {
	var r Report
	if err := c.do(ctx, http.MethodGet, "/v1/history/"+url.PathEscape(id), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// GPUs returns the node's GPU inventory with committed quotas.
func (c *Client) GPUs(ctx context.Context) ([]GPU, error) {
	var g []GPU
	if err := c.do(ctx, http.MethodGet, "/v1/gpus", nil, &g); err != nil {
		return nil, err
	}
	return g, nil
}

// Health checks that the daemon answers.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.do(ctx, http.MethodGet, "/healthz", nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// EndJob releases job id's session and queues this node's record for
// Slurm's accounting (the Epilog's one call).
func (c *Client) EndJob(ctx context.Context, id string, req api.JobEndRequest) (*api.JobEnd, error) {
	var e api.JobEnd
	if err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/end", req, &e); err != nil {
		return nil, err
	}
	return &e, nil
}
