package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coredns/caddy"
	coredns "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/forward"
	"github.com/miekg/dns"

	// The stock plugins the generated Corefile uses, imported one by one:
	// importing core/plugin would link every plugin CoreDNS has.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/bufsize"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/log"
)

// directives is the execution order of the embedded server. "cluster" sits
// before "cache" so cluster answers are never cached: a member added to State
// is answered by the very next query. "metrics" is this package's own request
// metrics, served on the admin listener. "access" refuses clients outside
// the networks answered (loopback, machine, pod networks, dns.allowFrom)
// before anything answers or forwards; it follows "metrics" so refusals
// show in the response metrics. "upstream" is the stock forwarder (policy
// sequential) behind a pointer swapped when the upstreams change, so a
// change needs no restart and no query or TCP connection in flight is lost.
var directives = []string{"bind", "metrics", "access", "errors", "log", "bufsize", "cluster", "cache", "upstream"}

var setupOnce = sync.OnceValue(func() error {
	if err := coredns.SetDirectives(directives); err != nil {
		return fmt.Errorf("dns: set directives: %w", err)
	}
	plugin.Register("cluster", setupCluster)
	plugin.Register("metrics", setupMetrics)
	plugin.Register("access", setupAccess)
	plugin.Register("upstream", setupUpstream)
	caddy.Quiet, coredns.Quiet = true, true
	return nil
})

// instances lets the cluster plugin, which caddy sets up from Corefile text,
// find the Server (and so the State) it answers for.
var (
	instancesMu sync.Mutex
	instances   = map[uint64]*Server{}
	nextID      uint64
)

func registerInstance(s *Server) uint64 {
	instancesMu.Lock()
	defer instancesMu.Unlock()
	nextID++
	instances[nextID] = s
	return nextID
}

func unregisterInstance(id uint64) {
	instancesMu.Lock()
	defer instancesMu.Unlock()
	delete(instances, id)
}

// setupCluster parses "cluster ZONE { instance ID }".
func setupCluster(c *caddy.Controller) error {
	var srv *Server
	for c.Next() {
		args := c.RemainingArgs()
		if len(args) != 1 {
			return plugin.Error("cluster", c.ArgErr())
		}
		var err error
		if srv, err = parseInstance(c); err != nil {
			return plugin.Error("cluster", err)
		}
		if dns.CanonicalName(args[0]) != srv.zone.zone {
			return plugin.Error("cluster", c.Errf("zone %q is not the cluster zone %q", args[0], srv.zone.zone))
		}
	}
	if srv == nil {
		return plugin.Error("cluster", c.ArgErr())
	}
	cfg := coredns.GetConfig(c)
	cfg.AddPlugin(func(next plugin.Handler) plugin.Handler {
		return &handler{next: next, srv: srv}
	})
	// CoreDNS calls this as it starts serving UDP: the fast path takes the
	// server from here to hand it what it does not answer. No decorator.
	cfg.UDPDecorateWriterFunc = func(cs *coredns.Server) dns.DecorateWriter {
		srv.core.Store(cs)
		return nil
	}
	return nil
}

// setupUpstream parses "upstream { instance ID }". The upstreams themselves
// are not in the Corefile: they belong to the Server and change in place.
func setupUpstream(c *caddy.Controller) error {
	var srv *Server
	for c.Next() {
		if len(c.RemainingArgs()) != 0 {
			return plugin.Error("upstream", c.ArgErr())
		}
		var err error
		if srv, err = parseInstance(c); err != nil {
			return plugin.Error("upstream", err)
		}
	}
	if srv == nil {
		return plugin.Error("upstream", c.ArgErr())
	}
	coredns.GetConfig(c).AddPlugin(func(plugin.Handler) plugin.Handler {
		return upstreamHandler{srv: srv}
	})
	return nil
}

// parseInstance reads the "{ instance ID }" block and finds its Server.
func parseInstance(c *caddy.Controller) (*Server, error) {
	var srv *Server
	for c.NextBlock() {
		if c.Val() != "instance" || !c.NextArg() {
			return nil, c.ArgErr()
		}
		id, err := strconv.ParseUint(c.Val(), 10, 64)
		if err != nil {
			return nil, c.Errf("instance %q: %v", c.Val(), err)
		}
		instancesMu.Lock()
		srv = instances[id]
		instancesMu.Unlock()
	}
	if srv == nil {
		return nil, c.Err("no running appliance DNS server for this Corefile")
	}
	return srv, nil
}

// upstreamHandler forwards to the Server's current forwarder.
type upstreamHandler struct{ srv *Server }

// Name implements plugin.Handler.
func (u upstreamHandler) Name() string { return "upstream" }

// ServeDNS implements plugin.Handler.
func (u upstreamHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	f := u.srv.fwd.Load()
	if f == nil {
		u.srv.metrics.forwarded[forwardFailed].Inc()
		return dns.RcodeServerFailure, errors.New("upstream: no upstream resolver")
	}
	rc, err := f.ServeDNS(ctx, w, r)
	u.srv.metrics.forwarded[forwardResult(rc, err)].Inc()
	return rc, err
}

// maxUpstreams is the most resolvers CoreDNS's forward takes in one stanza.
const maxUpstreams = 15 // cluster.MaxUpstreamDNS refuses longer configs

// newForwarder builds the stock forwarder for ups, tried in their order:
// the next one only when the one before fails or is down, as OpenShift's
// CoreDNS forwards (policy sequential), so a site whose first resolver is
// the authoritative split-horizon one gets its answers every time. The
// policy is unexported in the forward plugin, so the forwarder is built by
// the plugin's own setup from a one-stanza Corefile; everything else (health
// checks every 0.5 s after a failure, a proxy down after 2 failed checks
// skipped, recovery, connection reuse) is the stock plugin's. The caller
// runs OnShutdown when it retires it.
func newForwarder(ups []netip.AddrPort) (*forward.Forward, error) {
	if len(ups) == 0 {
		return nil, errors.New("dns: no upstream resolver given")
	}
	if len(ups) > maxUpstreams {
		return nil, fmt.Errorf("dns: %d upstream resolvers; CoreDNS's forward takes at most %d", len(ups), maxUpstreams)
	}
	setup, err := caddy.DirectiveAction("dns", "forward")
	if err != nil {
		return nil, fmt.Errorf("dns: forward plugin: %w", err)
	}
	var b strings.Builder
	b.WriteString("forward .")
	for _, u := range ups {
		if !u.IsValid() || u.Addr().Zone() != "" {
			return nil, fmt.Errorf("dns: upstream %v cannot be forwarded to", u)
		}
		b.WriteString(" " + u.String())
	}
	b.WriteString(" {\n\tpolicy sequential\n}\n")
	c := caddy.NewTestController("dns", b.String())
	if err := setup(c); err != nil {
		return nil, fmt.Errorf("dns: forward to %v: %w", ups, err)
	}
	chain := coredns.GetConfig(c).Plugin
	if len(chain) != 1 {
		return nil, fmt.Errorf("dns: forward setup added %d handlers, want 1", len(chain))
	}
	h := chain[0](nil)
	f, ok := h.(*forward.Forward)
	if !ok {
		return nil, fmt.Errorf("dns: forward setup added a %T", h)
	}
	// The setup's own OnStartup callbacks belong to the throwaway
	// controller: start the health checks here.
	if err := f.OnStartup(); err != nil {
		return nil, fmt.Errorf("dns: start forwarding to %v: %w", ups, err)
	}
	return f, nil
}

// setupMetrics parses "metrics { instance ID }": request, response and
// latency metrics of the Server, on the admin listener (no HTTP listener of
// its own, which would clash with a CoreDNS already on the host).
func setupMetrics(c *caddy.Controller) error {
	var srv *Server
	for c.Next() {
		if len(c.RemainingArgs()) != 0 {
			return plugin.Error("metrics", c.ArgErr())
		}
		var err error
		if srv, err = parseInstance(c); err != nil {
			return plugin.Error("metrics", err)
		}
	}
	if srv == nil {
		return plugin.Error("metrics", c.ArgErr())
	}
	coredns.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		return &metricsHandler{next: next, m: srv.metrics}
	})
	return nil
}

// metricsHandler counts requests and responses and times them.
type metricsHandler struct {
	next plugin.Handler
	m    *metrics
}

// Name implements plugin.Handler.
func (h *metricsHandler) Name() string { return "metrics" }

// ServeDNS implements plugin.Handler.
func (h *metricsHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	start := time.Now()
	var qtype uint16
	if len(r.Question) > 0 {
		qtype = r.Question[0].Qtype
	}
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	h.m.request(tcp, qtype).Inc()
	rw := &rcodeRecorder{ResponseWriter: w, rcode: -1}
	status, err := plugin.NextOrFailure(h.Name(), h.next, ctx, rw, r)
	rc := rw.rcode
	if rc < 0 {
		// Nothing written: the server answers with the returned status.
		rc = status
	}
	h.m.response(rc).Inc()
	h.m.duration.Observe(time.Since(start).Seconds())
	return status, err
}

// rcodeRecorder remembers the response code written.
type rcodeRecorder struct {
	dns.ResponseWriter
	rcode int
}

// WriteMsg implements dns.ResponseWriter.
func (r *rcodeRecorder) WriteMsg(m *dns.Msg) error {
	r.rcode = m.Rcode
	return r.ResponseWriter.WriteMsg(m)
}

// handler is the cluster plugin: it answers cluster names from a State
// snapshot taken per query (lock-free) and passes every other name on.
type handler struct {
	next plugin.Handler
	srv  *Server
}

// Name implements plugin.Handler.
func (h *handler) Name() string { return "cluster" }

// ServeDNS implements plugin.Handler.
func (h *handler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 || r.Opcode != dns.OpcodeQuery {
		return plugin.NextOrFailure(h.Name(), h.next, ctx, w, r)
	}
	q := r.Question[0]
	if h.srv.mdns != nil && strings.HasSuffix(strings.ToLower(q.Name), ".local.") {
		return h.serveLocal(ctx, w, r)
	}
	res := h.srv.zone.lookup(q, h.srv.state.Snapshot())
	h.srv.metrics.answer(res.result)
	if res.result == resultFallthrough {
		return plugin.NextOrFailure(h.Name(), h.next, ctx, w, r)
	}
	m := reply(r, res)
	if err := w.WriteMsg(m); err != nil {
		return dns.RcodeServerFailure, fmt.Errorf("cluster: write reply: %w", err)
	}
	return dns.RcodeSuccess, nil
}

// serveLocal answers a .local name over mDNS: such names never exist in
// unicast DNS, so no answer on the link means NXDOMAIN, never a forward.
func (h *handler) serveLocal(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	q := r.Question[0]
	rrs, err := h.srv.mdns.Resolve(ctx, q.Name, q.Qtype)
	m := new(dns.Msg)
	m.SetReply(r)
	if err != nil || len(rrs) == 0 {
		h.srv.metrics.answer("mdns_" + resultNXDomain)
		m.Rcode = dns.RcodeNameError
	} else {
		h.srv.metrics.answer("mdns_" + resultAnswer)
		for _, rr := range rrs {
			rr.Header().Name = q.Name
		}
		m.Answer = rrs
	}
	if err := w.WriteMsg(m); err != nil {
		return dns.RcodeServerFailure, fmt.Errorf("cluster: write reply: %w", err)
	}
	return dns.RcodeSuccess, nil
}

// reply builds the authoritative response for a lookup result.
func reply(r *dns.Msg, res lookupResult) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Rcode = res.rcode()
	m.Answer = res.answer
	m.Ns = res.ns
	return m
}
