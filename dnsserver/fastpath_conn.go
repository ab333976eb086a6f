package dnsserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	coredns "github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// fastListener owns the UDP port: its sockets are bound before CoreDNS's
// (all with SO_REUSEPORT), and a reuseport BPF program steers every packet
// to them, so CoreDNS's own UDP socket stays idle. Each socket has a reader
// that answers cluster names from the fast table and hands everything else
// to CoreDNS's server (same plugin chain) through a packet channel served by
// a miekg/dns server, as CoreDNS's ServePacket would serve its socket.
type fastListener struct {
	srv   *Server
	conns []*net.UDPConn
	raws  []syscall.RawConn // conns[i]'s, for the readers' raw batch calls
	// pktinfo: bound to an unspecified address, so a reply must leave from
	// the address its query came to (IP_PKTINFO / IPV6_PKTINFO).
	pktinfo bool
	steered bool // the BPF program is attached
	closed  atomic.Bool

	table   atomic.Pointer[fastTable]
	buildMu sync.Mutex

	fallback *fallbackConn
	dnsSrv   *dns.Server // serves fallback with CoreDNS's server
	wg       sync.WaitGroup
}

// fastSockets is how many sockets (and readers) the fast path opens: one per
// CPU the process may run on, at most 4.
func fastSockets() int { return min(max(runtime.GOMAXPROCS(0), 1), 4) }

// listenFast binds the fast path's sockets on listen (host:port; port 0
// picks one). It returns the listener and the address bound.
func listenFast(srv *Server, listen string) (*fastListener, string, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			setRecvBuffer(int(fd), fastRecvBuffer)
		})
		return errors.Join(err, serr)
	}}
	l := &fastListener{srv: srv}
	addr := listen
	for i := range fastSockets() {
		pc, err := lc.ListenPacket(context.Background(), "udp", addr)
		if err != nil {
			l.close()
			return nil, "", fmt.Errorf("dns: listen on %s: %w", addr, err)
		}
		c := pc.(*net.UDPConn)
		l.conns = append(l.conns, c)
		rc, err := c.SyscallConn()
		if err != nil {
			l.close()
			return nil, "", fmt.Errorf("dns: listen on %s: %w", addr, err)
		}
		l.raws = append(l.raws, rc)
		if i == 0 {
			// Port 0 is now a port: the other sockets and CoreDNS's join it.
			host, _, _ := net.SplitHostPort(listen)
			_, port, _ := net.SplitHostPort(c.LocalAddr().String())
			addr = net.JoinHostPort(host, port)
			if a, ok := netip.AddrFromSlice(c.LocalAddr().(*net.UDPAddr).IP); ok && a.Unmap().IsUnspecified() {
				l.pktinfo = true
			}
		}
		if l.pktinfo {
			if err := setPktinfo(c); err != nil {
				l.close()
				return nil, "", err
			}
		}
	}
	if err := steer(l.conns[0], len(l.conns)); err != nil {
		// Without steering the kernel spreads packets over CoreDNS's socket
		// too: those are answered by the chain, only slower.
		srv.log.Warn("fast path: packets not steered to its sockets", "err", err)
	} else {
		l.steered = true
	}
	return l, addr, nil
}

// fastRecvBuffer is each fast-path socket's receive buffer. Queries that
// arrive while the readers do not run (the machine stalls, a node's pods
// start at once) wait in it and are answered late instead of dropped: the
// default, net.core.rmem_default (208 KiB), held 256 of them; this (8 MiB
// as the kernel counts it, which doubles what is asked) holds all 3,000 of
// TestDNSBurstWhileStopped's burst.
const fastRecvBuffer = 4 << 20

// setRecvBuffer sets fd's receive buffer to size, past net.core.rmem_max
// when the process may (CAP_NET_ADMIN, which it has on a node), else up to
// it.
func setRecvBuffer(fd, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	}
}

// steer attaches a reuseport program choosing socket (CPU mod n) of the
// group; the fast path's n sockets joined first, so they are 0..n-1.
func steer(c *net.UDPConn, n int) error {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtCPUID},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(n)},
		bpf.RetA{},
	})
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, p := range prog {
		filter[i] = unix.SockFilter{Code: p.Op, Jt: p.Jt, Jf: p.Jf, K: p.K}
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
			&unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]})
	})
	return errors.Join(err, serr)
}

// setPktinfo asks for each packet's destination address.
func setPktinfo(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	v6 := c.LocalAddr().(*net.UDPAddr).IP.To4() == nil
	var serr error
	err = rc.Control(func(fd uintptr) {
		if v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
			// IPv4 clients of a dual-stack socket; an IPv6-only socket refuses it.
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	})
	return errors.Join(err, serr)
}

// serve starts the readers and the chain's server for what they pass on.
// core is CoreDNS's server, whose ServeDNS runs the plugin chain.
func (l *fastListener) serve(core *coredns.Server) error {
	l.fallback = newFallbackConn(l)
	started := make(chan struct{})
	l.dnsSrv = &dns.Server{PacketConn: l.fallback, Net: "udp",
		NotifyStartedFunc: func() { close(started) },
		// As CoreDNS's ServePacket serves its own socket.
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			ctx := context.WithValue(context.Background(), coredns.Key{}, core)
			ctx = context.WithValue(ctx, coredns.LoopKey{}, 0)
			core.ServeDNS(ctx, w, r)
			l.fallback.forget(w.RemoteAddr())
		})}
	errc := make(chan error, 1)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		errc <- l.dnsSrv.ActivateAndServe()
	}()
	select {
	case <-started:
	case err := <-errc:
		return fmt.Errorf("dns: fast path fallback: %w", err)
	}
	for i, c := range l.conns {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.read(c, l.raws[i])
		}()
	}
	return nil
}

// current is the fast table of the cluster view now, packed on first use
// after each change of version.
func (l *fastListener) current() *fastTable {
	snap := l.srv.state.Snapshot()
	if t := l.table.Load(); t != nil && t.version == snap.Version {
		return t
	}
	l.buildMu.Lock()
	defer l.buildMu.Unlock()
	if t := l.table.Load(); t != nil && t.version == snap.Version {
		return t
	}
	t := newFastTable(&l.srv.zone, snap, l.srv.mdns != nil, l.srv.metrics)
	l.table.Store(t)
	return t
}

// fastBatch is how many packets one recvmmsg/sendmmsg moves at most.
const fastBatch = 32

// read is one socket's loop: read what has arrived (up to fastBatch
// packets in one call), answer what the fast path can, pass on the rest,
// send the answers in one call. It returns only once the listener is
// closed.
func (l *fastListener) read(c *net.UDPConn, rc syscall.RawConn) {
	oobSize := 0
	if l.pktinfo {
		oobSize = 128
	}
	in := newMmsgBatch(rc, fastBatch, fastMaxQuery, oobSize)
	out := newMmsgBatch(rc, fastBatch, ednsBufSize, min(oobSize, 64))
	key := make([]byte, 0, 260)
	m := l.srv.metrics
	fwd := l.srv.fwdCache
	mdns := l.srv.mdns != nil
	for {
		n, err := in.recv()
		if err != nil {
			if l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		start := time.Now()
		now := fwdNow()
		k, prefetches := 0, 0
		for i := range n {
			from, ok := in.from(i)
			if !ok {
				continue
			}
			q := in.data(i)
			if len(q) < 12 || q[2]&0x80 != 0 {
				continue // what miekg/dns drops: too short, or a response
			}
			var dst netip.Addr
			var oob []byte
			if l.pktinfo {
				dst = pktinfoDst(in.control(i))
				oob = pktinfoSrc(out.oob(k), dst)
			}
			// Refusals are the chain's: the access plugin answers and counts them.
			var pending *fwdPending
			if fq, qkey, ok := parseFastQuery(q, key[:0]); ok && l.srv.clients.allows(from.Addr()) {
				t := l.current()
				if r, e := t.answerParsed(out.buf(k), q, fq, qkey); r != nil {
					out.set(k, r, in, i, oob)
					k++
					// Counted as the chain counts: the response once
					// written (or tried).
					if e.request != nil {
						e.request.Inc()
						e.response.Inc()
						e.result.Inc()
					}
					m.fastAnswers.Inc()
					continue
				}
				if fwd != nil && fwdType(fq.qtype) && t.forwarded(qkey, mdns) {
					flags := fwdKeyFlags(q, fq)
					qkey = append(qkey, flags)
					if r, e := fwd.answer(out.buf(k), q, fq, qkey, now); r != nil {
						out.set(k, r, in, i, oob)
						k++
						m.fastAnswers.Inc()
						m.forwardHits.Inc()
						if fwd.prefetch(e, now) {
							// The chain counts this query, as it counts
							// a forwarded name; the hit does not.
							prefetches++
							m.forwardPrefetches.Inc()
							l.fallback.push(c, q, from, dst, &fwdPending{key: string(qkey), gen: e.gen, qtype: fq.qtype, flags: flags,
								request: e.request, prefetch: true})
							continue
						}
						// As the chain counts a forwarded name.
						e.request.Inc()
						e.response.Inc()
						e.result.Inc()
						continue
					}
					pending = &fwdPending{key: string(qkey), gen: fwd.gen.Load(), qtype: fq.qtype, flags: flags,
						request: m.request(false, fq.qtype)}
				}
			}
			l.fallback.push(c, q, from, dst, pending)
		}
		for sent := 0; sent < k; {
			w, err := out.send(sent, k)
			if err != nil {
				if l.closed.Load() || errors.Is(err, net.ErrClosed) {
					return
				}
				// Drop this one (a client gone, a full buffer) and go on.
				w = max(w, 1)
			}
			sent += w
		}
		if k > prefetches {
			// Each answer of the batch took the batch's time.
			d := time.Since(start).Seconds()
			for range k - prefetches {
				m.duration.Observe(d)
			}
		}
	}
}

// close closes the sockets, stops the fallback server and waits for every
// goroutine the listener started.
func (l *fastListener) close() {
	l.closed.Store(true)
	for _, c := range l.conns {
		_ = c.Close()
	}
	if l.dnsSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.dnsSrv.ShutdownContext(ctx)
		cancel()
	}
	l.wg.Wait()
}

// fallbackConn is the net.PacketConn the chain's miekg/dns server reads:
// packets the fast path passes on, written back through the socket they
// came from. Its addresses are *net.UDPAddr, as a socket's would be, so
// plugins see UDP clients as they always do.
type fallbackConn struct {
	l     *fastListener
	ch    chan fallbackPacket
	wake  chan struct{} // closed when a read deadline in the past is set
	once  sync.Once
	mu    sync.Mutex
	route map[*net.UDPAddr]fallbackRoute // per packet in flight
}

type fallbackPacket struct {
	data []byte
	addr *net.UDPAddr
	fallbackRoute
}

// fallbackRoute is how a reply leaves: which socket, from which address.
type fallbackRoute struct {
	conn *net.UDPConn
	dst  netip.Addr // the query's destination, when pktinfo
	// pending: the reply may fill the forward cache.
	pending *fwdPending
}

func newFallbackConn(l *fastListener) *fallbackConn {
	return &fallbackConn{l: l, ch: make(chan fallbackPacket, 1024), wake: make(chan struct{}),
		route: map[*net.UDPAddr]fallbackRoute{}}
}

// push queues a packet for the chain; when the queue is full it is dropped,
// as a full socket buffer would drop it.
func (f *fallbackConn) push(c *net.UDPConn, q []byte, from netip.AddrPort, dst netip.Addr, pending *fwdPending) {
	p := fallbackPacket{data: append([]byte(nil), q...), addr: net.UDPAddrFromAddrPort(from),
		fallbackRoute: fallbackRoute{conn: c, dst: dst, pending: pending}}
	select {
	case f.ch <- p:
	default:
	}
}

// ReadFrom implements net.PacketConn.
func (f *fallbackConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-f.ch:
		f.mu.Lock()
		f.route[p.addr] = p.fallbackRoute
		f.mu.Unlock()
		return copy(b, p.data), p.addr, nil
	case <-f.wake:
		return 0, nil, os.ErrDeadlineExceeded
	}
}

// WriteTo implements net.PacketConn.
func (f *fallbackConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, fmt.Errorf("dns: fast path: write to %v", addr)
	}
	f.mu.Lock()
	r, ok := f.route[ua]
	delete(f.route, ua)
	f.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("dns: fast path: no route to %v", addr)
	}
	var oob []byte
	if f.l.pktinfo {
		oob = pktinfoSrc(nil, r.dst)
	}
	if r.pending != nil && r.pending.prefetch {
		f.l.srv.fwdCache.fill(r.pending, b, fwdNow(), f.l.srv.metrics)
		return len(b), nil
	}
	n, _, err := r.conn.WriteMsgUDPAddrPort(b, oob, ua.AddrPort())
	if r.pending != nil && err == nil {
		f.l.srv.fwdCache.fill(r.pending, b, fwdNow(), f.l.srv.metrics)
	}
	return n, err
}

// forget drops the route of a query the chain did not answer.
func (f *fallbackConn) forget(addr net.Addr) {
	if ua, ok := addr.(*net.UDPAddr); ok {
		f.mu.Lock()
		delete(f.route, ua)
		f.mu.Unlock()
	}
}

// Close implements net.PacketConn; the sockets are the listener's.
func (f *fallbackConn) Close() error {
	f.once.Do(func() { close(f.wake) })
	return nil
}

// LocalAddr implements net.PacketConn.
func (f *fallbackConn) LocalAddr() net.Addr { return f.l.conns[0].LocalAddr() }

// SetDeadline implements net.PacketConn.
func (f *fallbackConn) SetDeadline(t time.Time) error { return f.SetReadDeadline(t) }

// SetReadDeadline implements net.PacketConn. The server sets a deadline
// in the past to stop reading; later deadlines only pace its loop.
func (f *fallbackConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		f.once.Do(func() { close(f.wake) })
	}
	return nil
}

// SetWriteDeadline implements net.PacketConn.
func (f *fallbackConn) SetWriteDeadline(time.Time) error { return nil }

// pktinfoDst reads the destination address from IP_PKTINFO or
// IPV6_PKTINFO in a control message.
func pktinfoDst(oob []byte) netip.Addr {
	for len(oob) >= unix.SizeofCmsghdr {
		l, level, typ := cmsgHeader(oob)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			break
		}
		data := oob[unix.SizeofCmsghdr:l]
		switch {
		case level == unix.IPPROTO_IP && typ == unix.IP_PKTINFO && len(data) >= 12:
			return netip.AddrFrom4([4]byte(data[8:12])) // ipi_addr
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_PKTINFO && len(data) >= 16:
			return netip.AddrFrom16([16]byte(data[0:16]))
		}
		oob = oob[min(unix.CmsgSpace(l-unix.SizeofCmsghdr), len(oob)):]
	}
	return netip.Addr{}
}

// pktinfoSrc appends a control message that sends from src (nothing for an
// invalid src: the kernel picks).
func pktinfoSrc(b []byte, src netip.Addr) []byte {
	if !src.IsValid() {
		return b
	}
	hdr := func(level, typ, n int) {
		var h [unix.SizeofCmsghdr]byte
		w := unix.SizeofCmsghdr - 8 // the length field: a size_t
		if w == 8 {
			binary.NativeEndian.PutUint64(h[0:], uint64(unix.CmsgLen(n)))
		} else {
			binary.NativeEndian.PutUint32(h[0:], uint32(unix.CmsgLen(n)))
		}
		binary.NativeEndian.PutUint32(h[w:], uint32(level))
		binary.NativeEndian.PutUint32(h[w+4:], uint32(typ))
		b = append(b, h[:]...)
	}
	if src.Is4() || src.Is4In6() {
		hdr(unix.IPPROTO_IP, unix.IP_PKTINFO, 12)
		a := src.Unmap().As4()
		b = append(b, 0, 0, 0, 0) // ipi_ifindex
		b = append(b, a[:]...)    // ipi_spec_dst
		b = append(b, 0, 0, 0, 0) // ipi_addr
	} else {
		hdr(unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, 20)
		a := src.As16()
		b = append(b, a[:]...)
		b = append(b, 0, 0, 0, 0) // ipi6_ifindex
	}
	for len(b)%(unix.SizeofCmsghdr-8) != 0 {
		b = append(b, 0)
	}
	return b
}

// cmsgHeader reads a control message header: struct cmsghdr is a size_t
// length, then level and type (ints).
func cmsgHeader(b []byte) (l int, level, typ int32) {
	w := unix.SizeofCmsghdr - 8
	if w == 8 {
		l = int(binary.NativeEndian.Uint64(b[0:]))
	} else {
		l = int(binary.NativeEndian.Uint32(b[0:]))
	}
	return l, int32(binary.NativeEndian.Uint32(b[w:])), int32(binary.NativeEndian.Uint32(b[w+4:]))
}
