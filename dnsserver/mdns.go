package dnsserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/errgroup"

	"appliance/internal/cluster"
	"appliance/internal/host"
)

// mDNS constants (RFC 6762, RFC 6763).
const (
	mdnsPort = 5353
	// MDNSService is the DNS-SD service type every node publishes.
	MDNSService = "_appliance._udp.local."
	// DefaultMDNSTTL is how long a silent node stays a member.
	DefaultMDNSTTL = 120 * time.Second
	servicesEnum   = "_services._dns-sd._udp.local."
	cacheFlush     = 0x8000
	legacyMaxTTL   = 10
)

var (
	mdnsGroup4 = &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251), Port: mdnsPort}
	mdnsGroup6 = &net.UDPAddr{IP: net.ParseIP("ff02::fb"), Port: mdnsPort}
)

// ViewSource tells mDNS who this node is and where its addresses are, now
// and whenever that changes. *host.Host is one; tests feed views of their own.
type ViewSource interface {
	View() *host.View
	Subscribe(ctx context.Context) <-chan *host.View
}

// MDNSOptions configures multicast DNS publishing and browsing.
type MDNSOptions struct {
	Enabled bool
	// Host is where the node's name, role, interface and addresses come
	// from, followed at runtime. nil: MDNS runs a host.Host of its own,
	// with Interface, Node and Role below as its options.
	Host ViewSource
	// Interface pins the interface to publish and browse on (only without
	// Host); default network.interface, else wherever the node's addresses
	// in network.machineCIDRs are.
	Interface string
	// Node is this node's name (only without Host); default the configured
	// node owning a local address, else the short host name.
	Node string
	// Role of a node that is not in the config (only without Host).
	Role cluster.Role
	// TTL of published records; a node silent for a TTL is dropped.
	// Default DefaultMDNSTTL.
	TTL time.Duration
	// NetNS is the path of the network namespace the sockets are opened in
	// (and that the own Host watches); "" is the process's own.
	NetNS string
}

func (o *MDNSOptions) check() error {
	if o.TTL < 0 || (o.TTL > 0 && o.TTL < time.Second) {
		return fmt.Errorf("dns: mdns.ttl %v: at least 1s", o.TTL)
	}
	return nil
}

// MDNS publishes this node (A/AAAA for <node>.local and an _appliance._udp
// service instance whose TXT carries cluster, role and node name) and
// browses for the other nodes of the same cluster, feeding them into State
// as SourceMDNS members that expire after their TTL. It publishes only the
// node's own addresses (never a VIP), follows them to another interface at
// runtime, and refuses announcements that contradict what the config, the
// Kubernetes API or this node know.
type MDNS struct {
	cfg    *cluster.Config
	state  *cluster.State
	opts   MDNSOptions
	log    *slog.Logger
	base   *slog.Logger // the caller's, for the own Host's log lines
	m      *metrics
	domain string // cluster domain, e.g. "ocp4.example.com"
	// listen opens a socket; a seam for tests.
	listen func(fam int, ifi *net.Interface) (mconn, error)

	self atomic.Pointer[host.View] // what is published; nil before the first view
	kick chan struct{}             // a socket (re)opened: ask and announce

	mu      sync.Mutex
	bound   binding
	rebound chan struct{}    // closed and replaced when bound changes
	conns   [2]mconn         // by family; nil while not open
	closed  bool             // Run is ending: open nothing more
	known   map[string]*peer // by member name
	waiters map[*waiter]struct{}
	refused []RefusedClaim
}

// waiter is a pending Resolve.
type waiter struct {
	name  string // lower case, fully qualified
	qtype uint16
	ch    chan []dns.RR // buffered, receives once
}

type peer struct {
	member  cluster.Member
	expires time.Time
}

// NewMDNS prepares mDNS for cfg's cluster; Run binds its sockets.
func NewMDNS(cfg *cluster.Config, state *cluster.State, opts MDNSOptions, log *slog.Logger) (*MDNS, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultMDNSTTL
	}
	return &MDNS{cfg: cfg, state: state, opts: opts, log: log.With("component", "mdns"), base: log, m: newMetrics(),
		domain: strings.TrimSuffix(cfg.Cluster.Domain(), "."), listen: listenMDNS,
		kick: make(chan struct{}, 1), rebound: make(chan struct{}),
		known: map[string]*peer{}, waiters: map[*waiter]struct{}{}}, nil
}

// Run announces, answers and browses until ctx ends, then says goodbye
// (TTL 0) so peers drop this node at once, and closes the sockets. Every
// goroutine it starts has ended when it returns. It fails only when its own
// Host fails to identify the node.
func (d *MDNS) Run(ctx context.Context) error {
	eg, ctx := errgroup.WithContext(ctx)
	src := d.opts.Host
	if src == nil {
		h := host.New(d.cfg, host.Options{Node: d.opts.Node, Role: d.opts.Role, Interface: d.opts.Interface}, d.opts.NetNS, d.base)
		eg.Go(func() error { return h.Run(ctx) })
		src = h
	}
	views := src.Subscribe(ctx)
	for fam := range d.conns {
		eg.Go(func() error { return d.serveFamily(ctx, fam) })
	}
	eg.Go(func() error { return d.loop(ctx, views) })
	return eg.Wait()
}

// loop follows the node's view and keeps announcing until ctx ends.
func (d *MDNS) loop(ctx context.Context, views <-chan *host.View) error {
	every := d.opts.TTL / 3
	announce := time.NewTicker(every)
	defer announce.Stop()
	sweep := time.NewTicker(min(time.Second, every))
	defer sweep.Stop()
	// Announce twice after a change, a second apart (RFC 6762 8.3), in
	// case the first is lost.
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	for {
		select {
		case <-ctx.Done():
			d.sendMsg(d.message(d.records(0)), nil)
			d.closeAll()
			return nil
		case v, ok := <-views:
			if !ok {
				views = nil // ctx is ending
				continue
			}
			if d.apply(v) {
				d.announce()
				again.Reset(time.Second)
			}
		case <-d.kick:
			// Ask once so a fresh socket learns the others without
			// waiting for their next announcement.
			q := new(dns.Msg)
			q.SetQuestion(MDNSService, dns.TypePTR)
			q.RecursionDesired = false
			d.sendMsg(q, nil)
			d.announce()
			again.Reset(time.Second)
		case <-again.C:
			d.announce()
		case <-announce.C:
			d.announce()
		case now := <-sweep.C:
			d.expire(now)
		}
	}
}

// apply takes a new view of the node. It re-binds the sockets when the
// interface changed (they announce once open) and reports whether the
// published records changed on the same interface, to be announced now.
func (d *MDNS) apply(v *host.View) bool {
	old := d.self.Swap(v)
	if v.Problem != "" {
		// host logs it as a WARN already.
		d.log.Info("nothing to publish over mDNS while the node has no usable interface", "problem", v.Problem)
	}
	cur, _ := d.currentBinding()
	if v.Interface != cur.name || v.Index != cur.index {
		if cur.index != 0 || v.Index != 0 {
			d.log.Info("mdns follows the node's addresses", "interface", v.Interface, "was", cur.name, "addrs", v.Prefixes)
		}
		if cur.index != 0 {
			d.m.mdnsRebinds.Inc()
		}
		d.rebind(v.Interface, v.Index)
		return false
	}
	return old == nil || old.Name != v.Name || old.Role != v.Role || !slices.Equal(old.Prefixes, v.Prefixes)
}

// opened tells the loop that a socket has just been opened.
func (d *MDNS) opened() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *MDNS) instance(node string) string {
	// The cluster name keeps two clusters' "master-0" instances apart.
	return fmt.Sprintf("%s-%s.%s", d.cfg.Cluster.Name, node, MDNSService)
}

func hostName(node string) string { return dns.CanonicalName(node + ".local") }

// records are this node's published records with the given TTL (seconds):
// none before the node is known, and only its own addresses (the view never
// holds a VIP).
func (d *MDNS) records(ttl uint32) []dns.RR { return d.recordsOf(d.self.Load(), ttl) }

// recordsOf are the records published for view v.
func (d *MDNS) recordsOf(v *host.View, ttl uint32) []dns.RR {
	if v == nil || v.Name == "" {
		return nil
	}
	inst, host := d.instance(v.Name), hostName(v.Name)
	hdr := func(name string, t uint16, flush bool) dns.RR_Header {
		class := uint16(dns.ClassINET)
		if flush {
			class |= cacheFlush
		}
		return dns.RR_Header{Name: name, Rrtype: t, Class: class, Ttl: ttl}
	}
	rrs := []dns.RR{
		&dns.PTR{Hdr: hdr(MDNSService, dns.TypePTR, false), Ptr: inst},
		&dns.SRV{Hdr: hdr(inst, dns.TypeSRV, true), Port: 53, Target: host},
		&dns.TXT{Hdr: hdr(inst, dns.TypeTXT, true), Txt: []string{
			"cluster=" + d.domain, "role=" + string(v.Role), "node=" + v.Name}},
	}
	for _, a := range v.Addrs() {
		if a.Is4() {
			rrs = append(rrs, &dns.A{Hdr: hdr(host, dns.TypeA, true), A: a.AsSlice()})
		} else {
			rrs = append(rrs, &dns.AAAA{Hdr: hdr(host, dns.TypeAAAA, true), AAAA: a.AsSlice()})
		}
	}
	return rrs
}

func (d *MDNS) ttlSeconds() uint32 { return uint32(d.opts.TTL / time.Second) }

// announce multicasts this node's records, once it has an address to give.
func (d *MDNS) announce() {
	if v := d.self.Load(); v == nil || len(v.Prefixes) == 0 {
		return
	}
	d.sendMsg(d.message(d.records(d.ttlSeconds())), nil)
}

// message is an unsolicited response carrying rrs; nil when there are none.
func (d *MDNS) message(rrs []dns.RR) *dns.Msg {
	if len(rrs) == 0 {
		return nil
	}
	m := new(dns.Msg)
	m.Response, m.Authoritative = true, true
	m.Answer = rrs
	return m
}

// sendMsg multicasts m on every open socket, or unicasts it to dst. A send
// that fails is logged at debug level: the socket's reader notices a broken
// socket, and a lost datagram is mDNS's normal weather.
func (d *MDNS) sendMsg(m *dns.Msg, dst net.Addr) {
	if m == nil {
		return
	}
	b, err := m.Pack()
	if err != nil {
		d.log.Warn("pack", "err", err)
		return
	}
	c4, c6 := d.conn(fam4), d.conn(fam6)
	if c4 == nil && c6 == nil {
		return
	}
	d.m.mdnsSent.Inc()
	if dst != nil {
		c := c4
		if ua, ok := dst.(*net.UDPAddr); ok && ua.IP.To4() == nil {
			c = c6
		}
		if c == nil {
			return
		}
		if err := c.WriteTo(b, dst); err != nil {
			d.log.Debug("send", "to", dst, "err", err)
		}
		return
	}
	if c4 != nil {
		if err := c4.WriteTo(b, mdnsGroup4); err != nil {
			d.log.Debug("send", "to", mdnsGroup4, "err", err)
		}
	}
	if c6 != nil {
		if err := c6.WriteTo(b, mdnsGroup6); err != nil {
			d.log.Debug("send", "to", mdnsGroup6, "err", err)
		}
	}
}

// handle is one packet from the link. A malformed one is counted and
// dropped.
func (d *MDNS) handle(b []byte, src net.Addr) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		d.m.mdnsMalformed.Inc()
		return
	}
	if m.Response {
		d.deliver(m)
		d.learn(parseAnnouncement(m, d.domain), srcAddr(src), time.Now())
		return
	}
	d.answer(m, src)
}

// srcAddr is a packet's source address without port and zone.
func srcAddr(src net.Addr) netip.Addr {
	if ua, ok := src.(*net.UDPAddr); ok {
		if a, ok := netip.AddrFromSlice(ua.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// answer responds to questions about this node. A query from a port other
// than 5353 is a legacy unicast one (dig @224.0.0.251 -p 5353): it gets a
// unicast reply with its ID and question, and TTLs of at most 10 s.
func (d *MDNS) answer(q *dns.Msg, src net.Addr) {
	own := d.records(d.ttlSeconds())
	if len(own) == 0 {
		return // nothing published yet
	}
	var ans []dns.RR
	for _, qu := range q.Question {
		name := strings.ToLower(qu.Name)
		if name == servicesEnum && (qu.Qtype == dns.TypePTR || qu.Qtype == dns.TypeANY) {
			ans = append(ans, &dns.PTR{Hdr: dns.RR_Header{Name: servicesEnum, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: d.ttlSeconds()}, Ptr: MDNSService})
			continue
		}
		for _, rr := range own {
			h := rr.Header()
			if strings.EqualFold(h.Name, name) && (qu.Qtype == h.Rrtype || qu.Qtype == dns.TypeANY) {
				ans = append(ans, rr)
			}
		}
	}
	if len(ans) == 0 {
		return
	}
	ua, _ := src.(*net.UDPAddr)
	if ua != nil && ua.Port != mdnsPort {
		r := new(dns.Msg)
		r.SetReply(q)
		r.Authoritative = true
		for _, rr := range ans {
			rr = dns.Copy(rr)
			rr.Header().Class &^= cacheFlush
			rr.Header().Ttl = min(rr.Header().Ttl, legacyMaxTTL)
			r.Answer = append(r.Answer, rr)
		}
		d.sendMsg(r, src)
		return
	}
	// A multicast answer carries the whole set, so a browser learns the node
	// from one packet.
	if slices.ContainsFunc(ans, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypePTR && rr.Header().Name == MDNSService }) {
		ans = own
	}
	d.sendMsg(d.message(ans), nil)
}

// announcement is one node as described by an mDNS response.
type announcement struct {
	member cluster.Member
	ttl    time.Duration
}

// parseAnnouncement extracts the members of cluster domain from an mDNS
// response. It is pure so it can be fuzzed.
func parseAnnouncement(m *dns.Msg, domain string) []announcement {
	type inst struct {
		target string
		txt    map[string]string
		ttl    uint32
		hasTTL bool
	}
	insts := map[string]*inst{}
	get := func(name string) *inst {
		name = strings.ToLower(name)
		if insts[name] == nil {
			insts[name] = &inst{}
		}
		return insts[name]
	}
	addrs := map[string][]netip.Addr{}
	for _, rr := range slices.Concat(m.Answer, m.Ns, m.Extra) {
		h := rr.Header()
		if !strings.HasSuffix(strings.ToLower(h.Name), MDNSService) && h.Rrtype != dns.TypeA && h.Rrtype != dns.TypeAAAA {
			continue
		}
		switch r := rr.(type) {
		case *dns.SRV:
			in := get(h.Name)
			in.target = strings.ToLower(r.Target)
			in.ttl, in.hasTTL = h.Ttl, true
		case *dns.TXT:
			in := get(h.Name)
			in.txt = map[string]string{}
			for _, kv := range r.Txt {
				k, v, _ := strings.Cut(kv, "=")
				in.txt[strings.ToLower(k)] = v
			}
			if !in.hasTTL || h.Ttl < in.ttl {
				in.ttl, in.hasTTL = h.Ttl, true
			}
		case *dns.A:
			if a, ok := netip.AddrFromSlice(r.A); ok {
				addrs[strings.ToLower(h.Name)] = append(addrs[strings.ToLower(h.Name)], a.Unmap())
			}
		case *dns.AAAA:
			if a, ok := netip.AddrFromSlice(r.AAAA); ok {
				addrs[strings.ToLower(h.Name)] = append(addrs[strings.ToLower(h.Name)], a)
			}
		}
	}
	var out []announcement
	for _, in := range insts {
		if in.txt == nil || !strings.EqualFold(in.txt["cluster"], domain) {
			continue
		}
		name := in.txt["node"]
		if _, ok := dns.IsDomainName(name); !ok || name == "" || strings.Contains(name, ".") {
			continue
		}
		out = append(out, announcement{
			member: cluster.Member{Name: name, Role: cluster.Role(in.txt["role"]), IPs: addrs[in.target], Source: cluster.SourceMDNS, Healthy: true},
			ttl:    time.Duration(in.ttl) * time.Second,
		})
	}
	slices.SortFunc(out, func(a, b announcement) int { return strings.Compare(a.member.Name, b.member.Name) })
	return out
}

// learn applies announcements heard from src: upserts the members nobody
// else knows (keeping addresses already known when a packet carries none),
// refuses those that contradict what is known, and drops those saying
// goodbye.
func (d *MDNS) learn(anns []announcement, src netip.Addr, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	self := d.self.Load()
	for _, a := range anns {
		if a.ttl == 0 {
			if _, ok := d.known[a.member.Name]; ok {
				delete(d.known, a.member.Name)
				d.state.RemoveMember(a.member.Name, cluster.SourceMDNS)
				d.log.Info("member left", "node", a.member.Name)
			}
			continue
		}
		v := judgeClaim(a.member, d.state.Snapshot(), d.cfg, self)
		switch v.Outcome {
		case claimKnown:
			continue
		case claimRefused:
			d.refuse(a.member, src, v, now)
			continue
		}
		p, ok := d.known[a.member.Name]
		if !ok {
			p = &peer{}
			d.known[a.member.Name] = p
			d.log.Info("member found", "node", a.member.Name, "role", a.member.Role, "addrs", a.member.IPs, "from", src)
		}
		if len(a.member.IPs) == 0 {
			a.member.IPs = p.member.IPs
		}
		a.member.LastSeen = now
		p.member, p.expires = a.member, now.Add(a.ttl)
		d.state.UpsertMember(a.member)
	}
	d.m.members.Set(float64(len(d.known)))
}

// refuse counts and records a refused claim, and logs it unless the same
// claim was logged within refusedLogEvery. Called with d.mu held.
func (d *MDNS) refuse(m cluster.Member, src netip.Addr, v claimVerdict, now time.Time) {
	d.m.refused(v.Reason).Inc()
	var log bool
	d.refused, log = recordRefused(d.refused, RefusedClaim{From: src, Node: m.Name, Addrs: slices.Clone(m.IPs), Reason: v.Reason, Detail: v.Detail}, now)
	if log {
		d.log.Warn("mdns claim refused", "from", src, "node", m.Name, "addrs", m.IPs, "reason", v.Reason, "detail", v.Detail)
	}
}

// MDNSStatus is mDNS's part of the DNS service's /status.
type MDNSStatus struct {
	Node string `json:"node"`
	// Interface is where the sockets are bound.
	Interface string       `json:"interface"`
	Addrs     []netip.Addr `json:"addrs"`
	Problem   string       `json:"problem,omitempty"`
	// Sockets lists the families whose socket is open.
	Sockets []string `json:"sockets"`
	// Members are the nodes known through mDNS only.
	Members []string `json:"members"`
	// RefusedClaims are the most recent announcements not believed.
	RefusedClaims []RefusedClaim `json:"refusedClaims"`
}

// Status reports what mDNS publishes and has refused.
func (d *MDNS) Status() MDNSStatus {
	var st MDNSStatus
	if v := d.self.Load(); v != nil {
		st.Node, st.Addrs, st.Problem = v.Name, v.Addrs(), v.Problem
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st.Interface = d.bound.name
	for fam, c := range d.conns {
		if c != nil {
			st.Sockets = append(st.Sockets, famNames[fam])
		}
	}
	for name := range d.known {
		st.Members = append(st.Members, name)
	}
	slices.Sort(st.Members)
	st.RefusedClaims = slices.Clone(d.refused)
	return st
}

// expire drops members silent for longer than their TTL.
func (d *MDNS) expire(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, p := range d.known {
		if now.After(p.expires) {
			delete(d.known, name)
			d.state.RemoveMember(name, cluster.SourceMDNS)
			d.log.Info("member expired", "node", name)
		}
	}
	d.m.members.Set(float64(len(d.known)))
}

// Resolve asks the link for name (a .local name) with a one-shot mDNS query
// and returns the first answer's matching records, so that names avahi or
// any other responder publishes resolve through the cluster DNS. It gives up
// when ctx ends or after a second.
func (d *MDNS) Resolve(ctx context.Context, name string, qtype uint16) ([]dns.RR, error) {
	name = dns.CanonicalName(name)
	if v := d.self.Load(); v != nil && name == hostName(v.Name) {
		var out []dns.RR
		for _, rr := range d.records(d.ttlSeconds()) {
			if h := rr.Header(); h.Name == name && (h.Rrtype == qtype || qtype == dns.TypeANY) {
				rr = dns.Copy(rr)
				rr.Header().Class &^= cacheFlush
				out = append(out, rr)
			}
		}
		return out, nil
	}
	w := &waiter{name: name, qtype: qtype, ch: make(chan []dns.RR, 1)}
	d.mu.Lock()
	d.waiters[w] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.waiters, w)
		d.mu.Unlock()
	}()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.RecursionDesired = false
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resend := time.NewTicker(250 * time.Millisecond)
	defer resend.Stop()
	for {
		d.sendMsg(q, nil)
		select {
		case rrs := <-w.ch:
			return rrs, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("dns: mdns: no answer for %s: %w", name, ctx.Err())
		case <-resend.C:
		}
	}
}

// deliver hands a response's records to the Resolve calls waiting for them.
func (d *MDNS) deliver(m *dns.Msg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.waiters {
		var rrs []dns.RR
		for _, rr := range slices.Concat(m.Answer, m.Extra) {
			h := rr.Header()
			if strings.EqualFold(h.Name, w.name) && (h.Rrtype == w.qtype || w.qtype == dns.TypeANY) && h.Ttl > 0 {
				rr = dns.Copy(rr)
				rr.Header().Class &^= cacheFlush
				rrs = append(rrs, rr)
			}
		}
		if len(rrs) > 0 {
			select {
			case w.ch <- rrs:
			default:
			}
			delete(d.waiters, w)
		}
	}
}
