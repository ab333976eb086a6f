package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/arp"
)

// prober checks pool addresses for squatters with ARP before they are
// offered. One reader goroutine collects every ARP packet on the interface;
// a probe sends a request and waits at most timeout for the address to speak.
// Probes run concurrently, so a burst of new clients waits one timeout, not
// one per client. It moves with the server (move) when the node's address
// goes to another interface.
type prober struct {
	c       atomic.Pointer[arp.Client]
	timeout time.Duration

	mu      sync.Mutex
	iface   string // where c is
	stopped bool   // run's context ended: a move must not start a new read
	waiting map[netip.Addr][]chan struct{}
}

func newProber(ifi *net.Interface, timeout time.Duration) (*prober, error) {
	c, err := dialARP(ifi.Name)
	if err != nil {
		return nil, err
	}
	p := &prober{timeout: timeout, iface: ifi.Name, waiting: map[netip.Addr][]chan struct{}{}}
	p.c.Store(c)
	return p, nil
}

// dialARP opens an ARP socket on the interface named name.
func dialARP(name string) (*arp.Client, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("dhcp: ARP probe socket on %s: %w", name, err)
	}
	c, err := arp.Dial(ifi)
	if err != nil {
		return nil, fmt.Errorf("dhcp: ARP probe socket on %s: %w", name, err)
	}
	return c, nil
}

// move switches the prober to socket c on interface name; the old socket
// is closed, which ends run's read on it, and run goes on with c.
func (p *prober) move(c *arp.Client, name string) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	old := p.c.Swap(c)
	p.iface = name
	p.mu.Unlock()
	_ = old.Close()
}

// interfaceName is where the prober sends and listens.
func (p *prober) interfaceName() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.iface
}

func (p *prober) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.stopped = true
		_ = p.c.Load().SetReadDeadline(time.Unix(1, 0))
		p.mu.Unlock()
	})
	defer stop()
	for ctx.Err() == nil {
		c := p.c.Load()
		pkt, _, err := c.Read()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var op *net.OpError
			if errors.As(err, &op) && p.c.Load() == c {
				// The socket itself failed (its device gone): do not spin
				// on it; a move brings a new one.
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
			continue // not ARP, truncated, or a socket moved from: go on
		}
		p.mu.Lock()
		for _, ch := range p.waiting[pkt.SenderIP] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		p.mu.Unlock()
	}
}

// inUse reports whether some host answered for ip within the timeout.
func (p *prober) inUse(ctx context.Context, ip netip.Addr) bool {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.waiting[ip] = append(p.waiting[ip], ch)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		ws := p.waiting[ip]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(p.waiting, ip)
		} else {
			p.waiting[ip] = ws
		}
		p.mu.Unlock()
	}()
	if err := p.c.Load().Request(ip); err != nil {
		return false // cannot probe: do not block the client on it
	}
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (p *prober) close() { _ = p.c.Load().Close() }
