package dhcp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/mdlayher/arp"
)

// prober checks pool addresses for squatters with ARP before they are
// offered. One reader goroutine collects every ARP packet on the interface;
// a probe sends a request and waits at most timeout for the address to speak.
// Probes run concurrently, so a burst of new clients waits one timeout, not
// one per client.
type prober struct {
	c       *arp.Client
	timeout time.Duration

	mu      sync.Mutex
	waiting map[netip.Addr][]chan struct{}
}

func newProber(ifi *net.Interface, timeout time.Duration) (*prober, error) {
	c, err := arp.Dial(ifi)
	if err != nil {
		return nil, fmt.Errorf("dhcp: ARP probe socket on %s: %w", ifi.Name, err)
	}
	return &prober{c: c, timeout: timeout, waiting: map[netip.Addr][]chan struct{}{}}, nil
}

func (p *prober) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = p.c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for ctx.Err() == nil {
		pkt, _, err := p.c.Read()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue // not ARP, truncated: ignore
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
	if err := p.c.Request(ip); err != nil {
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

func (p *prober) close() { _ = p.c.Close() }
