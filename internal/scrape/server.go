package scrape

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AuthReviewerName names the ClusterRole and ClusterRoleBinding that let
// every kubelet's credentials (the group system:nodes) create TokenReviews
// and SubjectAccessReviews; MetricsReaderName the ones that let cluster
// monitoring's Prometheus get /metrics. `appliance manifests` writes both
// to MonitoringManifest (bootstrap checks the names match).
const (
	AuthReviewerName   = "appliance-auth-reviewer"
	MetricsReaderName  = "appliance-metrics-reader"
	MonitoringManifest = "openshift/99-appliance-monitoring.yaml"
)

// Options configure the secure scrape endpoint.
type Options struct {
	// Port is the port it listens on at each address; 0 picks a free one
	// per address (tests).
	Port int
	// Addrs are the node's addresses to listen on until SetAddrs says
	// otherwise.
	Addrs []netip.Addr
	// CertFile holds the certificate chain and key in PEM; "" means
	// DefaultCertFile.
	CertFile string
	// Metrics is what an authorised caller of Path gets.
	Metrics http.Handler
	// Path is the one path served and the non-resource URL authorised;
	// "" means /metrics.
	Path string
	// Kubeconfig holds the credentials the reviews are made with (the
	// kubelet's, as kubenodes.Kubeconfig picks them); required.
	Kubeconfig string
	// LocalServer replaces the kubeconfig's server as it does for
	// kubenodes (the node's own apiserver on the control plane).
	LocalServer string
	// AllowTTL and DenyTTL are how long a decision is reused; 0 means a
	// minute for an allowed token and ten seconds for a refused one.
	AllowTTL, DenyTTL time.Duration
	// Registerer, when set, gets appliance_scrape_requests_total.
	Registerer prometheus.Registerer
}

// Server is the secure scrape endpoint, a service: Run listens (once a
// certificate loads) and serves until its context ends.
type Server struct {
	opts    Options
	log     *slog.Logger
	certs   *certSource
	auth    *reviewer
	tls     *tls.Config
	srv     *http.Server
	kick    chan struct{}
	retry   time.Duration
	results *prometheus.CounterVec

	mu      sync.Mutex
	want    []netip.Addr
	lns     map[netip.Addr]net.Listener
	bindErr map[netip.Addr]error
}

// New prepares the endpoint; it binds nothing and contacts nothing.
func New(opts Options, log *slog.Logger) (*Server, error) {
	if opts.Kubeconfig == "" {
		return nil, errors.New("scrape: no kubeconfig: the secure endpoint cannot check its callers without the Kubernetes API")
	}
	if opts.Metrics == nil {
		return nil, errors.New("scrape: nothing to serve")
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("scrape: port %d is not a port (admin.metricsPort)", opts.Port)
	}
	if opts.CertFile == "" {
		opts.CertFile = DefaultCertFile
	}
	if opts.Path == "" {
		opts.Path = "/metrics"
	}
	if opts.AllowTTL == 0 {
		opts.AllowTTL = time.Minute
	}
	if opts.DenyTTL == 0 {
		opts.DenyTTL = 10 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "scrape")
	s := &Server{
		opts:  opts,
		log:   log,
		certs: &certSource{path: opts.CertFile, every: time.Second, log: log},
		auth: &reviewer{kubeconfig: opts.Kubeconfig, local: opts.LocalServer, path: opts.Path,
			allowTTL: opts.AllowTTL, denyTTL: opts.DenyTTL, timeout: 5 * time.Second, reload: 2 * time.Second,
			slots: make(chan struct{}, 4)},
		kick:    make(chan struct{}, 1),
		retry:   2 * time.Second,
		want:    slices.Clone(opts.Addrs),
		lns:     map[netip.Addr]net.Listener{},
		bindErr: map[netip.Addr]error{},
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appliance_scrape_requests_total",
			Help: "Requests to the secure scrape endpoint, by result: allowed, no_token (401), unauthenticated (401), forbidden (403), unavailable (503: the Kubernetes API gave no decision).",
		}, []string{"result"}),
	}
	for _, r := range []string{resultAllowed, resultNoToken, resultUnauthenticated, resultForbidden, resultUnavailable} {
		s.results.WithLabelValues(r)
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(s.results); err != nil {
			return nil, fmt.Errorf("scrape: metrics: %w", err)
		}
	}
	s.tls = &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.certs.get()
		},
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug), // failed handshakes of scanners
	}
	return s, nil
}

// Name is the service's key in /status.
func (s *Server) Name() string { return "scrape" }

// SetAddrs moves the endpoint to addrs: listeners on addresses no longer
// there close, new ones open (at once when a certificate is loaded).
func (s *Server) SetAddrs(addrs []netip.Addr) {
	s.mu.Lock()
	s.want = slices.Clone(addrs)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Listening are the addresses listened on now.
func (s *Server) Listening() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []net.Addr
	for _, ln := range s.lns {
		out = append(out, ln.Addr())
	}
	slices.SortFunc(out, func(a, b net.Addr) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// Run serves until ctx ends. It waits for a certificate before it listens,
// and retries an address that cannot be bound; it fails only on its own
// server's failure.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	serve := func(ln net.Listener) {
		wg.Go(func() {
			err := s.srv.Serve(tls.NewListener(ln, s.tls))
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				select {
				case errc <- fmt.Errorf("scrape: serve on %s: %w", ln.Addr(), err):
				default:
				}
			}
		})
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
		s.mu.Lock()
		for a, ln := range s.lns {
			_ = ln.Close()
			delete(s.lns, a)
		}
		s.mu.Unlock()
		wg.Wait()
		s.auth.close()
	}()
	t := time.NewTicker(s.retry)
	defer t.Stop()
	for {
		s.certs.refresh()
		s.reconcile(serve)
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-s.kick:
		case <-t.C:
		}
	}
}

// reconcile listens on every wanted address once a certificate is loaded,
// and closes the listeners of addresses no longer wanted.
func (s *Server) reconcile(serve func(net.Listener)) {
	ready := s.certs.problem() == nil
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, ln := range s.lns {
		if !slices.Contains(s.want, a) {
			_ = ln.Close()
			delete(s.lns, a)
			s.log.Info("stopped listening: the address is no longer the node's", "addr", ln.Addr().String())
		}
	}
	for a := range s.bindErr {
		if !slices.Contains(s.want, a) {
			delete(s.bindErr, a)
		}
	}
	if !ready {
		return
	}
	for _, a := range s.want {
		if _, ok := s.lns[a]; ok {
			continue
		}
		addr := net.JoinHostPort(a.String(), strconv.Itoa(s.opts.Port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if prev := s.bindErr[a]; prev == nil || prev.Error() != err.Error() {
				s.log.Warn("cannot listen; trying again", "addr", addr, "err", err)
			}
			s.bindErr[a] = err
			continue
		}
		delete(s.bindErr, a)
		s.lns[a] = ln
		s.log.Info("listening", "addr", ln.Addr().String(), "path", s.opts.Path)
		serve(ln)
	}
}

// ServeHTTP serves Path to callers the API authorises, and nothing else.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != s.opts.Path {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		s.results.WithLabelValues(resultNoToken).Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="appliance"`)
		http.Error(w, "Unauthorized: send a bearer token of a user allowed to get "+s.opts.Path, http.StatusUnauthorized)
		return
	}
	d := s.auth.decide(r.Context(), token)
	s.results.WithLabelValues(d.result).Inc()
	switch d.result {
	case resultAllowed:
		s.opts.Metrics.ServeHTTP(w, r)
	case resultUnauthenticated:
		w.Header().Set("WWW-Authenticate", `Bearer realm="appliance"`)
		http.Error(w, "Unauthorized: "+d.reason, http.StatusUnauthorized)
	case resultForbidden:
		http.Error(w, "Forbidden: "+d.reason, http.StatusForbidden)
	default:
		s.log.Debug("refused a scrape: no decision from the Kubernetes API", "err", d.reason)
		http.Error(w, "Service Unavailable: the caller cannot be checked with the Kubernetes API: "+d.reason, http.StatusServiceUnavailable)
	}
}

// bearer is the token of an "Authorization: Bearer TOKEN" header.
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Status is the endpoint's section of /status.
type Status struct {
	Port        int        `json:"port"`
	Path        string     `json:"path"`
	Listening   []string   `json:"listening"`
	BindErrors  []string   `json:"bind_errors,omitempty"`
	Certificate CertStatus `json:"certificate"`
	API         APIStatus  `json:"api"`
	// Problem is why an authorised caller would not be served now.
	Problem string `json:"problem,omitempty"`
}

// Status reports what it listens on, with which certificate, and how its
// reviews reach the API.
func (s *Server) Status() any {
	st := Status{Port: s.opts.Port, Path: s.opts.Path, Listening: []string{}, Certificate: s.certs.status(), API: s.auth.status()}
	for _, a := range s.Listening() {
		st.Listening = append(st.Listening, a.String())
	}
	s.mu.Lock()
	for a, err := range s.bindErr {
		st.BindErrors = append(st.BindErrors, a.String()+": "+err.Error())
	}
	s.mu.Unlock()
	slices.Sort(st.BindErrors)
	if err := s.Problem(); err != nil {
		st.Problem = err.Error()
	}
	return st
}

// Problem is why an authorised caller would not get the metrics now: no
// certificate yet, no address listened on, no kubeconfig, or the API did
// not answer the last review. nil when none of these holds.
func (s *Server) Problem() error {
	if err := s.certs.problem(); err != nil {
		return fmt.Errorf("not listening: %w", err)
	}
	s.mu.Lock()
	n, want := len(s.lns), len(s.want)
	var bindErrs []error
	for _, err := range s.bindErr {
		bindErrs = append(bindErrs, err)
	}
	s.mu.Unlock()
	switch {
	case want == 0:
		return errors.New("not listening: the node has no machine-network address")
	case n == 0 && len(bindErrs) > 0:
		return fmt.Errorf("not listening: %w", errors.Join(bindErrs...))
	case n == 0:
		return errors.New("not listening yet")
	}
	return s.auth.problem()
}
