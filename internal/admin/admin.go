package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options says what the admin listener serves.
type Options struct {
	Listen   string               // host:port; ":0" style ports are allowed (see Server.Addr)
	Registry *prometheus.Registry // served on /metrics
	Status   func() any           // marshalled as JSON on /status
	Ready    func() error         // nil error: ready; nil func: always ready
	// Notes, when set, names conditions /readyz lists after its verdict
	// without counting them: parts whose failure must not make the node
	// unready (the secure scrape endpoint before the Kubernetes API exists).
	Notes func() error
}

// Server is the admin HTTP listener.
type Server struct {
	opts Options
	ln   net.Listener
	log  *slog.Logger
}

// New binds the listener at once so a port clash is reported before any
// service starts.
func New(opts Options, log *slog.Logger) (*Server, error) {
	if opts.Registry == nil {
		return nil, errors.New("admin: no metrics registry")
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s (set admin.listen or --admin-listen to a free port): %w", opts.Listen, err)
	}
	return &Server{opts: opts, ln: ln, log: log.With("component", "admin")}, nil
}

// Addr is the address the listener is bound to.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Handler returns the admin routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		var notes string
		if s.opts.Notes != nil {
			if err := s.opts.Notes(); err != nil {
				notes = "not counted: " + strings.ReplaceAll(err.Error(), "\n", "\nnot counted: ") + "\n"
			}
		}
		if s.opts.Ready != nil {
			if err := s.opts.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error()+"\n"+notes, http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprint(w, "ok\n"+notes)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		var v any = struct{}{}
		if s.opts.Status != nil {
			v = s.opts.Status()
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			s.log.Warn("encode status", "err", err)
		}
	})
	return mux
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin: serve: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}
