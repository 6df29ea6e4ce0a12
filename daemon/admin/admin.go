// Package admin serves the admin HTTP API (docs/api.md) and the
// /metrics and /healthz endpoints.
package admin

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gpuslice/gpuslice/daemon/session"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/version"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const maxBody = 1 << 20

// Handler returns the admin API handler (served on the root-only socket).
// rec queues the records of ended jobs for Slurm's accounting (nil:
// none are kept).
func Handler(m *session.Manager, rec Recorder, reg *prometheus.Registry, log *slog.Logger) http.Handler {
	h := &handler{m: m, rec: rec, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /metrics", metricsHandler(reg))
	mux.HandleFunc("GET /v1/gpus", h.gpus)
	mux.HandleFunc("POST /v1/sessions", h.create)
	mux.HandleFunc("GET /v1/sessions", h.list)
	mux.HandleFunc("GET /v1/sessions/{id}", h.get)
	mux.HandleFunc("PATCH /v1/sessions/{id}", h.patch)
	mux.HandleFunc("DELETE /v1/sessions/{id}", h.delete)
	mux.HandleFunc("POST /v1/jobs/{id}/end", h.jobEnd)
	mux.HandleFunc("GET /v1/history/{id}", h.history)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, fmt.Errorf("%w: no route %s %s", api.ErrNotFound, r.Method, r.URL.Path))
	})
	return mux
}

// PublicHandler serves only /metrics and /healthz (the optional TCP listener).
func PublicHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /metrics", metricsHandler(reg))
	return mux
}

func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: version.Version})
}

type handler struct {
	m   *session.Manager
	rec Recorder
	log *slog.Logger
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":"encode reply","code":"internal"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// writeErr maps an error to its status and code once, for every route.
func writeErr(w http.ResponseWriter, err error) {
	status, code := api.Classify(err)
	writeJSON(w, status, api.ErrorBody{Error: err.Error(), Code: code})
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: request body: %v", api.ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: request body: trailing data", api.ErrBadRequest)
	}
	return nil
}

func (h *handler) gpus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.m.Inventory())
}

func (h *handler) create(w http.ResponseWriter, r *http.Request) {
	var req api.SessionRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	var s api.Session
	var created bool
	var err error
	if req.CreatorPID != 0 {
		// Bound to the process that sent it, as the kernel names it.
		p, ok := peerOf(r.Context())
		if !ok || p.PID != req.CreatorPID || p.Start == 0 {
			writeErr(w, fmt.Errorf("%w: creator_pid %d is not the process that sent the request (peer pid %d)", api.ErrBadRequest, req.CreatorPID, p.PID))
			return
		}
		s, created, err = h.m.CreateFor(req, p)
	} else {
		s, created, err = h.m.Create(req)
	}
	if err != nil {
		var refusal *session.Refusal
		switch {
		case errors.As(err, &refusal):
			// who holds the room, for the administrator only
			args := []any{"session", req.ID, "err", err}
			for _, i := range refusal.GPUs {
				args = append(args, fmt.Sprintf("gpu%d_held_by", i), strings.Join(h.m.Holders(i, 8), "; "))
			}
			h.log.Info("create refused", args...)
		case !errors.Is(err, api.ErrBadRequest):
			h.log.Info("create refused", "session", req.ID, "err", err)
		}
		writeErr(w, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	writeJSON(w, code, s)
}

// list streams the sessions: one encoded at a time, through a buffer.
func (h *handler) list(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteByte('[')
	var buf []byte
	first := true
	h.m.Each(func(s api.Session) {
		buf = buf[:0]
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = api.AppendSessionJSON(buf, s)
		bw.Write(buf)
	})
	bw.WriteString("]\n")
	bw.Flush()
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	s, err := h.m.Get(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *handler) patch(w http.ResponseWriter, r *http.Request) {
	var req api.PatchRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	s, err := h.m.Patch(r.PathValue("id"), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	rep, err := h.m.Delete(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (h *handler) history(w http.ResponseWriter, r *http.Request) {
	rep, err := h.m.History(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}
