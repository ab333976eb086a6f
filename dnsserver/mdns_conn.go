package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Socket families, also the index into MDNS.conns and the metric label.
const (
	fam4 = 0
	fam6 = 1
)

var famNames = [2]string{"ipv4", "ipv6"}

// Backoff of a socket that fails: 100 ms, doubling up to maxReopen. A socket
// that worked for longer than maxReopen starts again at minReopen.
const (
	minReopen = 100 * time.Millisecond
	maxReopen = 5 * time.Second
)

// mconn is one bound mDNS socket, IPv4 or IPv6.
type mconn interface {
	// ReadFrom returns a packet and the index of the interface it arrived
	// on (0 when unknown).
	ReadFrom(b []byte) (n, ifindex int, src net.Addr, err error)
	// WriteTo sends b to dst, multicast through the bound interface.
	WriteTo(b []byte, dst net.Addr) error
	Close() error
}

type conn4 struct{ *ipv4.PacketConn }

func (c conn4) ReadFrom(b []byte) (int, int, net.Addr, error) {
	n, cm, src, err := c.PacketConn.ReadFrom(b)
	if cm == nil {
		return n, 0, src, err
	}
	return n, cm.IfIndex, src, err
}

func (c conn4) WriteTo(b []byte, dst net.Addr) error {
	_, err := c.PacketConn.WriteTo(b, nil, dst)
	return err
}

type conn6 struct{ *ipv6.PacketConn }

func (c conn6) ReadFrom(b []byte) (int, int, net.Addr, error) {
	n, cm, src, err := c.PacketConn.ReadFrom(b)
	if cm == nil {
		return n, 0, src, err
	}
	return n, cm.IfIndex, src, err
}

func (c conn6) WriteTo(b []byte, dst net.Addr) error {
	_, err := c.PacketConn.WriteTo(b, nil, dst)
	return err
}

// binding is the interface the sockets are for; gen changes with every
// change of interface, so a socket opened for an older one is dropped.
type binding struct {
	name  string
	index int // 0: no interface, no sockets
	gen   uint64
}

// listenMDNS opens one family's socket on port 5353 and joins the group on
// the interface. The socket is shared with avahi or any other responder on
// the host through SO_REUSEPORT.
func listenMDNS(fam int, ifi *net.Interface) (mconn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
		})
		return errors.Join(err, serr)
	}}
	if fam == fam4 {
		pc, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", mdnsPort))
		if err != nil {
			return nil, fmt.Errorf("listen udp4 :%d: %w", mdnsPort, err)
		}
		c := ipv4.NewPacketConn(pc)
		if err := errors.Join(c.JoinGroup(ifi, mdnsGroup4), c.SetMulticastInterface(ifi),
			c.SetMulticastTTL(255), c.SetMulticastLoopback(false), c.SetControlMessage(ipv4.FlagInterface, true)); err != nil {
			pc.Close()
			return nil, fmt.Errorf("join %v on %s: %w", mdnsGroup4.IP, ifi.Name, err)
		}
		return conn4{c}, nil
	}
	pc, err := lc.ListenPacket(context.Background(), "udp6", fmt.Sprintf("[::]:%d", mdnsPort))
	if err != nil {
		return nil, fmt.Errorf("listen udp6 :%d: %w", mdnsPort, err)
	}
	c := ipv6.NewPacketConn(pc)
	if err := errors.Join(c.JoinGroup(ifi, mdnsGroup6), c.SetMulticastInterface(ifi),
		c.SetMulticastHopLimit(255), c.SetMulticastLoopback(false), c.SetControlMessage(ipv6.FlagInterface, true)); err != nil {
		pc.Close()
		return nil, fmt.Errorf("join %v on %s: %w", mdnsGroup6.IP, ifi.Name, err)
	}
	return conn6{c}, nil
}

// inNetNS runs fn on a thread inside the network namespace at path ("" runs
// fn where the caller is). The thread is locked and never unlocked, so it
// ends with its goroutine and no other goroutine ever runs in the namespace.
// Sockets keep the namespace they were opened in.
func inNetNS(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("open network namespace %s: %w", path, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			done <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// open binds one family's socket for b in the configured namespace.
func (d *MDNS) open(fam int, b binding) (mconn, error) {
	var c mconn
	err := inNetNS(d.opts.NetNS, func() error {
		var err error
		c, err = d.listen(fam, &net.Interface{Index: b.index, Name: b.name})
		return err
	})
	return c, err
}

// currentBinding returns the binding and a channel closed when it changes.
func (d *MDNS) currentBinding() (binding, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bound, d.rebound
}

// rebind points the sockets at b: the sockets of the old interface are
// closed (their readers then open new ones) and everyone waiting on the
// binding is woken.
func (d *MDNS) rebind(name string, index int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bound = binding{name: name, index: index, gen: d.bound.gen + 1}
	close(d.rebound)
	d.rebound = make(chan struct{})
	for i, c := range d.conns {
		if c != nil {
			c.Close()
			d.conns[i] = nil
		}
	}
}

// attach makes c the family's socket unless the binding changed since it
// was opened or mDNS is stopping.
func (d *MDNS) attach(fam int, gen uint64, c mconn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.bound.gen != gen {
		return false
	}
	d.conns[fam] = c
	return true
}

func (d *MDNS) detach(fam int, c mconn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conns[fam] == c {
		d.conns[fam] = nil
	}
}

// closeAll closes the sockets for good: Run is ending.
func (d *MDNS) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for i, c := range d.conns {
		if c != nil {
			c.Close()
			d.conns[i] = nil
		}
	}
}

func (d *MDNS) conn(fam int) mconn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[fam]
}

// serveFamily keeps one family's socket open on the bound interface and
// reads it, until ctx ends. A socket that fails to open or to read is opened
// again with backoff, with a WARN line and a count; a socket closed because
// the interface changed is opened again at once on the new one. IPv6 is best
// effort: when its socket cannot be opened (no IPv6 on the host or the
// interface), it waits for the next interface change.
func (d *MDNS) serveFamily(ctx context.Context, fam int) error {
	backoff := minReopen
	log := d.log.With("family", famNames[fam])
	for {
		b, changed := d.currentBinding()
		if b.index == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				continue
			}
		}
		c, err := d.open(fam, b)
		if err != nil {
			d.m.mdnsSocketErrors.WithLabelValues(famNames[fam], "open").Inc()
			if fam == fam6 {
				log.Warn("no IPv6 mDNS on this interface until it changes", "interface", b.name, "err", err)
				select {
				case <-ctx.Done():
					return nil
				case <-changed:
					continue
				}
			}
			log.Warn("mdns socket cannot be opened; trying again", "interface", b.name, "err", err, "retry_in", backoff)
			if !d.pause(ctx, changed, backoff) {
				return nil
			}
			backoff = min(2*backoff, maxReopen)
			continue
		}
		if !d.attach(fam, b.gen, c) {
			c.Close()
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		log.Debug("mdns socket open", "interface", b.name)
		d.opened()
		start := time.Now()
		err = d.read(c, b.index)
		d.detach(fam, c)
		c.Close()
		if ctx.Err() != nil {
			return nil
		}
		if now, _ := d.currentBinding(); now.gen != b.gen {
			backoff = minReopen // closed on purpose: the interface changed
			continue
		}
		if time.Since(start) > maxReopen {
			backoff = minReopen
		}
		d.m.mdnsSocketErrors.WithLabelValues(famNames[fam], "read").Inc()
		log.Warn("mdns socket read failed; opening it again", "interface", b.name, "err", err, "retry_in", backoff)
		if !d.pause(ctx, changed, backoff) {
			return nil
		}
		backoff = min(2*backoff, maxReopen)
	}
}

// pause waits for wait, cut short by a change of interface; false when ctx
// ended.
func (d *MDNS) pause(ctx context.Context, changed <-chan struct{}, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-changed:
	case <-t.C:
	}
	return true
}

// read handles packets arriving on the bound interface until the socket
// fails or is closed.
func (d *MDNS) read(c mconn, index int) error {
	buf := make([]byte, 9000)
	for {
		n, ifindex, src, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		// The socket listens on every interface; only the bound one counts.
		if ifindex != 0 && ifindex != index {
			continue
		}
		d.handle(buf[:n], src)
	}
}
