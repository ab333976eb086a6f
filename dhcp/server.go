package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/arp"
	"golang.org/x/sys/unix"
)

// Ports of RFC 2131.
const (
	ServerPort = 67
	ClientPort = 68
)

// maxPacket bounds a received datagram; DHCP messages fit an Ethernet MTU.
const maxPacket = 1500

// maxProbes bounds ARP probes in flight (each holds a goroutine for one
// probe window).
const maxProbes = 1024

// expireEvery is how often expired leases are swept from the store.
const expireEvery = time.Minute

// Server answers DHCPv4 on one interface.
type Server struct {
	opts    Options
	policy  *Policy
	store   *Store
	metrics *Metrics
	log     *slog.Logger
	conn    atomic.Pointer[net.UDPConn] // replaced when the socket is opened again

	// sockMu orders opening and closing the socket: the reader's re-open,
	// SetInterface and the close when Run ends.
	sockMu  sync.Mutex
	iface   string // the interface the socket is bound to
	stopped bool   // Run has ended: open nothing more
	// listen opens the socket; tests replace it to inject failures.
	listen func(iface string) (*net.UDPConn, error)
	// dialARP opens the prober's socket on a move; tests replace it too.
	dialARP func(iface string) (*arp.Client, error)
	prober  *prober
	probes  chan struct{} // bounds probes in flight
	probing sync.WaitGroup
	bufs    sync.Pool

	debug bool // debug logging on: build per-packet log lines

	ackMu   sync.Mutex
	lastAck map[string]time.Time // reserved MAC → last ACK, for Status
}

// New opens the lease file and the socket: UDP 0.0.0.0:67 bound to
// opts.Interface (SO_BINDTODEVICE), so broadcasts arrive and replies leave by
// that interface only. The socket belongs to the calling thread's network
// namespace. When opts.ServerID is zero it becomes the interface's IPv4
// address inside opts.Network. metrics may be nil.
func New(opts Options, metrics *Metrics, log *slog.Logger) (*Server, error) {
	if opts.Interface == "" {
		return nil, errors.New("dhcp: no interface (set network.interface or --interface)")
	}
	ifi, err := net.InterfaceByName(opts.Interface)
	if err != nil {
		return nil, fmt.Errorf("dhcp: interface %s: %w", opts.Interface, err)
	}
	if !opts.ServerID.IsValid() {
		if opts.ServerID, err = interfaceAddr(ifi, opts.Network); err != nil {
			return nil, err
		}
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.ProbeTimeout == 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	policy, err := NewPolicy(opts)
	if err != nil {
		return nil, err
	}
	store, err := OpenStore(opts.LeaseFile)
	if err != nil {
		return nil, err
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	metrics.store, metrics.policy = store, policy
	metrics.serve = opts.ServePool
	s := &Server{
		opts: opts, policy: policy, store: store, metrics: metrics,
		log:     log.With("component", "dhcp", "interface", opts.Interface),
		probes:  make(chan struct{}, maxProbes),
		lastAck: map[string]time.Time{},
		bufs:    sync.Pool{New: func() any { b := make([]byte, maxPacket); return &b }},
		listen:  listen,
		dialARP: dialARP,
	}
	s.debug = s.log.Enabled(context.Background(), slog.LevelDebug)
	s.iface = opts.Interface
	conn, err := s.listen(opts.Interface)
	if err != nil {
		return nil, err
	}
	s.conn.Store(conn)
	if !opts.Pool.IsZero() && opts.ProbeTimeout > 0 {
		if s.prober, err = newProber(ifi, opts.ProbeTimeout); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return s, nil
}

// interfaceAddr is ifi's IPv4 address inside network (or its first IPv4).
func interfaceAddr(ifi *net.Interface, network netip.Prefix) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dhcp: addresses of %s: %w", ifi.Name, err)
	}
	var first netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip := addr(n.IP)
		if !ip.IsValid() {
			continue
		}
		if network.Contains(ip) {
			return ip, nil
		}
		if !first.IsValid() {
			first = ip
		}
	}
	if first.IsValid() {
		return first, nil
	}
	return netip.Addr{}, fmt.Errorf("dhcp: interface %s has no IPv4 address to use as server identifier", ifi.Name)
}

// Backoff between attempts to open the receive socket again.
const (
	minReopen = 100 * time.Millisecond
	maxReopen = 5 * time.Second
)

// listen opens 0.0.0.0:67 bound to the device. Binding to the interface's
// address instead would never receive the clients' broadcasts.
func listen(iface string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
				return
			}
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1); serr != nil {
				return
			}
			serr = unix.BindToDevice(int(fd), iface)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", ServerPort))
	if err != nil {
		return nil, fmt.Errorf("dhcp: listen on 0.0.0.0:%d on %s: %w", ServerPort, iface, err)
	}
	return pc.(*net.UDPConn), nil
}

// Policy returns the server's reply policy.
func (s *Server) Policy() *Policy { return s.policy }

// Store returns the server's lease store.
func (s *Server) Store() *Store { return s.store }

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Status is what /status shows of the server.
type Status struct {
	Interface    string     `json:"interface"`
	ServerID     netip.Addr `json:"serverID"`
	Reservations int        `json:"reservations"`
	Pool         string     `json:"pool,omitempty"`
	ServingPool  bool       `json:"servingPool"`
	Leases       []Lease    `json:"leases"`
	LeaseTime    string     `json:"leaseTime"`
	// Reserved lists the reservations with the last time each was ACKed
	// by this server (since it started).
	Reserved []ReservedStatus `json:"reserved"`
}

// ReservedStatus is one reservation in Status.
type ReservedStatus struct {
	MAC      string     `json:"mac"`
	IP       netip.Addr `json:"ip"`
	Hostname string     `json:"hostname,omitempty"`
	LastAck  *time.Time `json:"lastAck,omitempty"`
}

// SetInterface moves the server to interface name, where the node's
// address went: NetworkManager or OVN-Kubernetes moving it onto a bridge
// (br-ex) leaves the old device a bridge port, whose broadcasts the stack
// now receives on the bridge, so a socket bound to the port hears nothing.
// It opens the socket there first and closes the old one only once that
// worked; on error the server stays where it was. The ARP prober moves
// with it, so that it keeps probing when the old device goes away.
func (s *Server) SetInterface(name string) error {
	s.sockMu.Lock()
	defer s.sockMu.Unlock()
	if s.stopped || name == "" || name == s.iface {
		return nil
	}
	c, err := s.listen(name)
	if err != nil {
		return fmt.Errorf("dhcp: move from %s to %s: %w", s.iface, name, err)
	}
	if s.prober != nil {
		ac, err := s.dialARP(name)
		if err != nil {
			c.Close()
			return fmt.Errorf("dhcp: move from %s to %s: %w", s.iface, name, err)
		}
		s.prober.move(ac, name)
	}
	old := s.conn.Swap(c)
	s.log.Info("moved to another interface", "from", s.iface, "to", name)
	s.iface = name
	old.Close()
	return nil
}

// Interface is the interface the server listens on.
func (s *Server) Interface() string {
	s.sockMu.Lock()
	defer s.sockMu.Unlock()
	return s.iface
}

// Status returns the server's state for /status.
func (s *Server) Status() Status {
	st := Status{
		Interface: s.Interface(), ServerID: s.opts.ServerID,
		Reservations: len(s.opts.Reservations), ServingPool: s.servePool() && !s.opts.Pool.IsZero(),
		Leases: s.store.Leases(), LeaseTime: s.policy.leaseTime.String(),
	}
	s.ackMu.Lock()
	for _, r := range s.opts.Reservations {
		rs := ReservedStatus{MAC: r.MAC.String(), IP: r.IP, Hostname: r.Hostname}
		if at, ok := s.lastAck[r.MAC.String()]; ok {
			rs.LastAck = &at
		}
		st.Reserved = append(st.Reserved, rs)
	}
	s.ackMu.Unlock()
	if !s.opts.Pool.IsZero() {
		st.Pool = s.opts.Pool.Start.String() + "-" + s.opts.Pool.End.String()
	}
	return st
}

func (s *Server) servePool() bool {
	return s.opts.ServePool == nil || s.opts.ServePool()
}

type job struct {
	buf  *[]byte
	n    int
	peer *net.UDPAddr
}

// Run serves until ctx ends, then closes the socket and flushes the leases.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.log.Info("serving", "serverID", s.opts.ServerID, "network", s.opts.Network,
		"reservations", len(s.opts.Reservations), "pool", !s.opts.Pool.IsZero(), "leases", len(s.store.Leases()))
	var wg sync.WaitGroup
	storeDone := make(chan error, 1)
	go func() { storeDone <- s.store.Run(ctx) }()
	if s.prober != nil {
		wg.Go(func() { s.prober.run(ctx) })
	}
	wg.Go(func() {
		t := time.NewTicker(expireEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				if n := s.store.Expire(now); n > 0 {
					s.log.Info("expired leases reclaimed", "count", n)
				}
			}
		}
	})
	jobs := make(chan job, s.opts.Workers*4)
	for range s.opts.Workers {
		wg.Go(func() {
			for j := range jobs {
				s.handle(ctx, (*j.buf)[:j.n], j.peer)
				s.bufs.Put(j.buf)
			}
		})
	}
	stop := context.AfterFunc(ctx, func() {
		s.sockMu.Lock()
		s.stopped = true
		s.conn.Load().Close()
		s.sockMu.Unlock()
	})
	defer stop()
	var rerr error
	backoff := minReopen
	for ctx.Err() == nil {
		buf := s.bufs.Get().(*[]byte)
		conn := s.conn.Load()
		n, peer, err := conn.ReadFromUDP(*buf)
		if err != nil {
			s.bufs.Put(buf)
			if ctx.Err() != nil {
				break
			}
			if s.conn.Load() != conn {
				continue // SetInterface moved the socket
			}
			// A reader that stops would leave the server up and deaf:
			// open the socket again, backing off while that fails.
			s.metrics.reopens.Inc()
			s.log.Warn("receive failed; opening the socket again", "err", err, "retry_in", backoff)
			conn.Close()
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxReopen)
			s.sockMu.Lock()
			if !s.stopped && s.conn.Load() == conn {
				if c, err := s.listen(s.iface); err != nil {
					s.log.Warn("cannot open the socket yet", "err", err)
				} else {
					s.conn.Store(c)
				}
			}
			s.sockMu.Unlock()
			continue
		}
		backoff = minReopen
		select {
		case jobs <- job{buf: buf, n: n, peer: peer}:
		default:
			s.metrics.drops.WithLabelValues(string(DropOverload)).Inc()
			s.bufs.Put(buf)
		}
	}
	cancel()
	close(jobs)
	wg.Wait()
	s.probing.Wait()
	if s.prober != nil {
		s.prober.close()
	}
	if err := <-storeDone; err != nil && rerr == nil {
		rerr = err
	}
	return rerr
}

// handle answers one datagram.
func (s *Server) handle(ctx context.Context, b []byte, peer *net.UDPAddr) {
	req, err := dhcpv4.FromBytes(b)
	if err != nil {
		s.drop(DropMalformed, nil, "err", err, "peer", peer)
		return
	}
	s.metrics.received.WithLabelValues(req.MessageType().String()).Inc()
	d, gen := s.store.Update(func(v LeaseView) Decision {
		return s.policy.Decide(Input{Request: req, Leases: v, ServePool: s.servePool(), Now: time.Now()})
	})
	if d.Reply == nil {
		if d.Drop != "" {
			s.drop(d.Drop, req)
		} else if d.Change.Kind == ChangeDecline {
			s.log.Warn("client declined an address: another host uses it", "ip", d.Change.IP, "mac", req.ClientHWAddr.String())
		}
		_ = s.store.WaitDurable(ctx, gen)
		return
	}
	if d.FromPool && s.prober != nil && d.Reply.MessageType() == dhcpv4.MessageTypeOffer {
		// Probe off the worker, so a burst of new clients costs one probe
		// window, not one per worker; the offer is held for the client in
		// the store meanwhile.
		select {
		case s.probes <- struct{}{}:
		default:
			s.drop(DropOverload, req)
			return
		}
		s.probing.Go(func() {
			defer func() { <-s.probes }()
			ip := addr(d.Reply.YourIPAddr)
			if ctx.Err() != nil {
				return
			}
			if s.prober.inUse(ctx, ip) {
				s.log.Warn("pool address answers ARP: someone uses it without a lease; skipping it", "ip", ip)
				s.store.Apply(Change{Kind: ChangeDecline, IP: ip, Expiry: time.Now().Add(declineHold)})
				s.drop(DropProbeConflict, req)
				return
			}
			s.send(req, d.Reply)
		})
		return
	}
	if gen != 0 {
		start := time.Now()
		if err := s.store.WaitDurable(ctx, gen); err != nil {
			s.log.Error("lease not durable; ACK withheld", "err", err, "ip", addr(d.Reply.YourIPAddr), "mac", req.ClientHWAddr.String())
			s.drop(DropStore, req)
			return
		}
		s.metrics.flushes.Observe(time.Since(start).Seconds())
	}
	s.send(req, d.Reply)
}

func (s *Server) send(req, reply *dhcpv4.DHCPv4) {
	dst := destination(req, reply)
	if _, err := s.conn.Load().WriteToUDP(reply.ToBytes(), dst); err != nil {
		s.log.Warn("send reply", "err", err, "to", dst, "mac", req.ClientHWAddr.String())
		return
	}
	t := reply.MessageType().String()
	if reply.MessageType() == dhcpv4.MessageTypeAck {
		if _, ok := s.policy.byMAC[req.ClientHWAddr.String()]; ok {
			s.ackMu.Lock()
			s.lastAck[req.ClientHWAddr.String()] = time.Now()
			s.ackMu.Unlock()
		}
	}
	s.metrics.replies.WithLabelValues(t).Inc()
	if s.debug {
		s.log.Debug("reply", "type", t, "mac", req.ClientHWAddr.String(), "ip", addr(reply.YourIPAddr), "to", dst)
	}
}

func (s *Server) drop(r DropReason, req *dhcpv4.DHCPv4, kv ...any) {
	s.metrics.drops.WithLabelValues(string(r)).Inc()
	if !s.debug {
		return
	}
	if req != nil {
		kv = append(kv, "mac", req.ClientHWAddr.String(), "type", req.MessageType().String())
	}
	s.log.Debug("drop", append([]any{"reason", string(r)}, kv...)...)
}

// destination picks where a reply goes (RFC 2131 4.1): to the relay; a NAK
// broadcast; to ciaddr when the client has an address; else broadcast. The
// RFC prefers unicast to yiaddr at chaddr when the broadcast bit is clear,
// which needs an ARP entry for an address the client does not have yet; the
// RFC allows broadcasting instead, every client accepts it, and it leaves
// the host's neighbour table alone.
func destination(req, reply *dhcpv4.DHCPv4) *net.UDPAddr {
	if gi := addr(req.GatewayIPAddr); gi.IsValid() && !gi.IsUnspecified() {
		return &net.UDPAddr{IP: ip4(gi), Port: ServerPort}
	}
	if reply.MessageType() == dhcpv4.MessageTypeNak {
		return &net.UDPAddr{IP: net.IPv4bcast, Port: ClientPort}
	}
	if ci := addr(req.ClientIPAddr); ci.IsValid() && !ci.IsUnspecified() {
		return &net.UDPAddr{IP: ip4(ci), Port: ClientPort}
	}
	return &net.UDPAddr{IP: net.IPv4bcast, Port: ClientPort}
}
