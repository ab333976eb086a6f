package netlab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Pinger sends ICMP echo requests from a node at a fixed interval and records
// which were answered, so a test or benchmark can measure the data-plane
// outage a client sees while a VIP moves.
type Pinger struct {
	conn     *icmp.PacketConn
	dst      netip.Addr
	interval time.Duration
	id       int
	cancel   context.CancelFunc
	done     chan struct{}

	mu   sync.Mutex
	sent []time.Time // by sequence number
	got  []bool
}

// Outage is a run of unanswered echo requests.
type Outage struct {
	Start    time.Time     // when the first unanswered request was sent
	Duration time.Duration // until the first answered request after it was sent
	Lost     int
}

// Ping starts pinging dst from n every interval until Close. The socket is
// opened inside the node's namespace.
func (n *Node) Ping(dst netip.Addr, interval time.Duration) (*Pinger, error) {
	network, listen := "ip4:icmp", "0.0.0.0"
	if dst.Is6() {
		network, listen = "ip6:ipv6-icmp", "::"
	}
	var c *icmp.PacketConn
	if err := n.Do(func() error {
		var err error
		c, err = icmp.ListenPacket(network, listen)
		return err
	}); err != nil {
		return nil, fmt.Errorf("netlab: ping socket in %s: %w", n.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pinger{conn: c, dst: dst, interval: interval, id: rand.IntN(0xffff), cancel: cancel, done: make(chan struct{})}
	go p.receive()
	go p.send(ctx)
	return p, nil
}

func (p *Pinger) send(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if p.dst.Is6() {
		typ = ipv6.ICMPTypeEchoRequest
	}
	to := &net.IPAddr{IP: p.dst.AsSlice()}
	for seq := 0; ; seq++ {
		msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: p.id, Seq: seq & 0xffff, Data: []byte("netlab")}}
		b, err := msg.Marshal(nil)
		if err == nil {
			p.mu.Lock()
			p.sent = append(p.sent, time.Now())
			p.got = append(p.got, false)
			p.mu.Unlock()
			_, _ = p.conn.WriteTo(b, to)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Pinger) receive() {
	buf := make([]byte, 1500)
	proto := 1
	if p.dst.Is6() {
		proto = 58
	}
	for {
		n, _, err := p.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok || echo.ID != p.id || (m.Type != ipv4.ICMPTypeEchoReply && m.Type != ipv6.ICMPTypeEchoReply) {
			continue
		}
		p.mu.Lock()
		// Sequence numbers wrap at 16 bits; match the newest request with that number.
		for i := len(p.sent) - 1; i >= 0; i-- {
			if i&0xffff == echo.Seq {
				p.got[i] = true
				break
			}
		}
		p.mu.Unlock()
	}
}

// Close stops the pinger.
func (p *Pinger) Close() {
	p.cancel()
	<-p.done
	p.conn.Close()
}

// Counts returns how many requests were sent and answered so far.
func (p *Pinger) Counts() (sent, answered int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.got {
		if g {
			answered++
		}
	}
	return len(p.sent), answered
}

// Outages lists the runs of unanswered requests sent in [from, to), ignoring
// requests sent less than grace before now (their replies may be in flight).
func (p *Pinger) Outages(from, to time.Time, grace time.Duration) []Outage {
	p.mu.Lock()
	defer p.mu.Unlock()
	limit := time.Now().Add(-grace)
	var out []Outage
	var cur *Outage
	for i, at := range p.sent {
		if at.Before(from) || !at.Before(to) || at.After(limit) {
			continue
		}
		if !p.got[i] {
			if cur == nil {
				out = append(out, Outage{Start: at})
				cur = &out[len(out)-1]
			}
			cur.Lost++
			continue
		}
		if cur != nil {
			cur.Duration = at.Sub(cur.Start)
			cur = nil
		}
	}
	if cur != nil {
		cur.Duration = limit.Sub(cur.Start)
	}
	return out
}

// LongestOutage is the longest outage in [from, to), zero when none.
func (p *Pinger) LongestOutage(from, to time.Time, grace time.Duration) time.Duration {
	var longest time.Duration
	for _, o := range p.Outages(from, to, grace) {
		longest = max(longest, o.Duration)
	}
	return longest
}
