package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
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

// MDNSOptions configures multicast DNS publishing and browsing.
type MDNSOptions struct {
	Enabled bool
	// Interface to publish and browse on; default network.interface, else
	// the interface holding an address in network.machineCIDRs.
	Interface string
	// Node is this node's name; default the configured node owning one of the
	// interface's addresses, else the short host name.
	Node string
	// Role is published in the TXT record; default the configured node's role.
	Role cluster.Role
	// TTL of published records; a node silent for a TTL is dropped.
	// Default DefaultMDNSTTL.
	TTL time.Duration
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
// as SourceMDNS members that expire after their TTL.
type MDNS struct {
	cfg   *cluster.Config
	state *cluster.State
	opts  MDNSOptions
	log   *slog.Logger
	m     *metrics

	domain string // cluster domain, e.g. "ocp4.example.com"
	ifi    *net.Interface
	addrs  []netip.Addr
	c4     *ipv4.PacketConn
	c6     *ipv6.PacketConn

	mu      sync.Mutex
	known   map[string]*peer // by member name
	waiters map[*waiter]struct{}
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

// NewMDNS prepares mDNS for cfg's cluster; Open binds its sockets.
func NewMDNS(cfg *cluster.Config, state *cluster.State, opts MDNSOptions, log *slog.Logger) (*MDNS, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultMDNSTTL
	}
	return &MDNS{cfg: cfg, state: state, opts: opts, log: log.With("component", "mdns"), m: newMetrics(),
		domain: strings.TrimSuffix(cfg.Cluster.Domain(), "."), known: map[string]*peer{}, waiters: map[*waiter]struct{}{}}, nil
}

// Open finds the interface and this node's identity and binds the mDNS
// sockets in the caller's network namespace (call it inside netlab's Do in
// tests).
func (d *MDNS) Open() error {
	ifaces, err := cluster.LocalInterfaces()
	if err != nil {
		return fmt.Errorf("dns: mdns: %w", err)
	}
	name := d.opts.Interface
	if name == "" {
		name = d.cfg.Network.Interface
	}
	for _, li := range ifaces {
		match := li.Name == name
		if name == "" {
			for _, p := range li.Addrs {
				if _, ok := d.cfg.Network.PrefixFor(p.Addr()); ok {
					match = true
				}
			}
		}
		if match {
			name = li.Name
			d.addrs = d.addrs[:0]
			for _, p := range li.Addrs {
				if a := p.Addr(); !a.IsLinkLocalUnicast() && !a.IsLoopback() {
					d.addrs = append(d.addrs, a.Unmap())
				}
			}
			break
		}
	}
	if name == "" {
		return errors.New("dns: mdns: no interface holds an address in network.machineCIDRs; set network.interface")
	}
	if d.ifi, err = net.InterfaceByName(name); err != nil {
		return fmt.Errorf("dns: mdns: interface %s: %w", name, err)
	}
	if d.opts.Node == "" {
		for _, a := range d.addrs {
			if n, ok := d.cfg.NodeByAddr(a); ok {
				d.opts.Node = n.Name
				break
			}
		}
	}
	if d.opts.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("dns: mdns: node name: %w; set it explicitly", err)
		}
		d.opts.Node, _, _ = strings.Cut(h, ".")
	}
	if d.opts.Role == "" {
		if n, ok := d.cfg.NodeByName(d.opts.Node); ok {
			d.opts.Role = n.Role
		}
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			// Share 5353 with avahi or another responder on the host.
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", mdnsPort))
	if err != nil {
		return fmt.Errorf("dns: mdns: listen udp4 :%d: %w", mdnsPort, err)
	}
	c4 := ipv4.NewPacketConn(pc)
	if err := errors.Join(c4.JoinGroup(d.ifi, mdnsGroup4), c4.SetMulticastInterface(d.ifi),
		c4.SetMulticastTTL(255), c4.SetMulticastLoopback(false), c4.SetControlMessage(ipv4.FlagInterface, true)); err != nil {
		pc.Close()
		return fmt.Errorf("dns: mdns: join %v on %s: %w", mdnsGroup4.IP, name, err)
	}
	d.c4 = c4
	// IPv6 is best effort: the interface may have no IPv6 at all.
	if pc6, err := lc.ListenPacket(context.Background(), "udp6", fmt.Sprintf("[::]:%d", mdnsPort)); err == nil {
		c6 := ipv6.NewPacketConn(pc6)
		if err := errors.Join(c6.JoinGroup(d.ifi, mdnsGroup6), c6.SetMulticastInterface(d.ifi),
			c6.SetMulticastHopLimit(255), c6.SetMulticastLoopback(false), c6.SetControlMessage(ipv6.FlagInterface, true)); err != nil {
			pc6.Close()
			d.log.Warn("no IPv6 mDNS", "interface", name, "err", err)
		} else {
			d.c6 = c6
		}
	}
	d.log.Info("mdns open", "interface", name, "node", d.opts.Node, "role", d.opts.Role, "addrs", d.addrs, "ipv6", d.c6 != nil)
	return nil
}

// Run announces, answers and browses until ctx ends, then says goodbye
// (TTL 0) so peers drop this node at once, and closes the sockets.
func (d *MDNS) Run(ctx context.Context) error {
	if d.c4 == nil {
		if err := d.Open(); err != nil {
			return err
		}
	}
	defer func() {
		d.send(d.records(0), nil)
		d.c4.Close()
		if d.c6 != nil {
			d.c6.Close()
		}
	}()
	go d.read4()
	if d.c6 != nil {
		go d.read6()
	}
	// Ask once so a fresh node learns the others without waiting for their
	// next announcement.
	q := new(dns.Msg)
	q.SetQuestion(MDNSService, dns.TypePTR)
	q.RecursionDesired = false
	d.sendMsg(q, nil)

	every := d.opts.TTL / 3
	announce := time.NewTicker(every)
	defer announce.Stop()
	sweep := time.NewTicker(min(time.Second, every))
	defer sweep.Stop()
	d.announce()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-announce.C:
			d.announce()
		case now := <-sweep.C:
			d.expire(now)
		}
	}
}

func (d *MDNS) instance() string {
	// The cluster name keeps two clusters' "master-0" instances apart.
	return fmt.Sprintf("%s-%s.%s", d.cfg.Cluster.Name, d.opts.Node, MDNSService)
}

func (d *MDNS) host() string { return dns.CanonicalName(d.opts.Node + ".local") }

// records are this node's published records with the given TTL (seconds).
func (d *MDNS) records(ttl uint32) []dns.RR {
	inst, host := d.instance(), d.host()
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
			"cluster=" + d.domain, "role=" + string(d.opts.Role), "node=" + d.opts.Node}},
	}
	for _, a := range d.addrs {
		if a.Is4() {
			rrs = append(rrs, &dns.A{Hdr: hdr(host, dns.TypeA, true), A: a.AsSlice()})
		} else {
			rrs = append(rrs, &dns.AAAA{Hdr: hdr(host, dns.TypeAAAA, true), AAAA: a.AsSlice()})
		}
	}
	return rrs
}

func (d *MDNS) ttlSeconds() uint32 { return uint32(d.opts.TTL / time.Second) }

func (d *MDNS) announce() { d.send(d.records(d.ttlSeconds()), nil) }

// send multicasts rrs as an unsolicited response, or unicasts to dst.
func (d *MDNS) send(rrs []dns.RR, dst net.Addr) {
	m := new(dns.Msg)
	m.Response, m.Authoritative = true, true
	m.Answer = rrs
	d.sendMsg(m, dst)
}

func (d *MDNS) sendMsg(m *dns.Msg, dst net.Addr) {
	b, err := m.Pack()
	if err != nil {
		d.log.Warn("pack", "err", err)
		return
	}
	d.m.mdnsSent.Inc()
	if dst != nil {
		if ua, ok := dst.(*net.UDPAddr); ok && ua.IP.To4() == nil && d.c6 != nil {
			_, err = d.c6.WriteTo(b, nil, dst)
		} else {
			_, err = d.c4.WriteTo(b, nil, dst)
		}
		if err != nil {
			d.log.Debug("send", "to", dst, "err", err)
		}
		return
	}
	if _, err := d.c4.WriteTo(b, nil, mdnsGroup4); err != nil {
		d.log.Debug("send", "to", mdnsGroup4, "err", err)
	}
	if d.c6 != nil {
		if _, err := d.c6.WriteTo(b, nil, mdnsGroup6); err != nil {
			d.log.Debug("send", "to", mdnsGroup6, "err", err)
		}
	}
}

func (d *MDNS) read4() {
	buf := make([]byte, 9000)
	for {
		n, cm, src, err := d.c4.ReadFrom(buf)
		if err != nil {
			return
		}
		if cm != nil && cm.IfIndex != d.ifi.Index {
			continue
		}
		d.handle(buf[:n], src)
	}
}

func (d *MDNS) read6() {
	buf := make([]byte, 9000)
	for {
		n, cm, src, err := d.c6.ReadFrom(buf)
		if err != nil {
			return
		}
		if cm != nil && cm.IfIndex != d.ifi.Index {
			continue
		}
		d.handle(buf[:n], src)
	}
}

func (d *MDNS) handle(b []byte, src net.Addr) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return
	}
	if m.Response {
		d.deliver(m)
		d.learn(parseAnnouncement(m, d.domain), time.Now())
		return
	}
	d.answer(m, src)
}

// answer responds to questions about this node. A query from a port other
// than 5353 is a legacy unicast one (dig @224.0.0.251 -p 5353): it gets a
// unicast reply with its ID and question, and TTLs of at most 10 s.
func (d *MDNS) answer(q *dns.Msg, src net.Addr) {
	own := d.records(d.ttlSeconds())
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
	d.send(ans, nil)
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

// learn applies announcements: upserts members (keeping addresses already
// known when a packet carries none) and drops those saying goodbye.
func (d *MDNS) learn(anns []announcement, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range anns {
		if a.member.Name == d.opts.Node {
			continue
		}
		if a.ttl == 0 {
			if _, ok := d.known[a.member.Name]; ok {
				delete(d.known, a.member.Name)
				d.state.RemoveMember(a.member.Name, cluster.SourceMDNS)
				d.log.Info("member left", "node", a.member.Name)
			}
			continue
		}
		p, ok := d.known[a.member.Name]
		if !ok {
			p = &peer{}
			d.known[a.member.Name] = p
			d.log.Info("member found", "node", a.member.Name, "role", a.member.Role, "addrs", a.member.IPs)
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
	if name == d.host() {
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
