package lab

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"

	"appliance/internal/netlab"
)

// get sends GET path to addr from n, over TLS when secure (the stand-ins'
// certificates are not verified), with host as the Host header, and
// returns the status and body. connected reports whether TCP connected.
func get(n *netlab.Node, addr, host, path string, secure bool, timeout time.Duration) (code int, body string, connected bool, err error) {
	raw, err := n.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, "", false, err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(timeout))
	var c net.Conn = raw
	if secure {
		c = tls.Client(raw, &tls.Config{InsecureSkipVerify: true, ServerName: host}) // stand-ins' throw-away certificates
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return 0, "", true, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", true, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, strings.TrimSpace(string(b)), true, err
}

// lookup asks the DNS server at server:53 for name's A records from n.
func lookup(n *netlab.Node, server netip.Addr, name string) ([]netip.Addr, error) {
	c, err := n.DialTimeout("udp", netip.AddrPortFrom(server, 53).String(), 0)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	dc := &dns.Conn{Conn: c}
	if err := dc.WriteMsg(m); err != nil {
		return nil, err
	}
	r, err := dc.ReadMsg()
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s", dns.RcodeToString[r.Rcode])
	}
	var out []netip.Addr
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

func addrsString(as []netip.Addr, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	if len(as) == 0 {
		return "(no answer)"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}

// holds reports whether n's lab interface carries addr.
func holds(n *netlab.Node, addr netip.Addr) bool {
	h, err := n.Handle()
	if err != nil {
		return false
	}
	defer h.Close()
	link, err := h.LinkByName(n.Iface)
	if err != nil {
		return false
	}
	as, _ := h.AddrList(link, netlink.FAMILY_V4)
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
			return true
		}
	}
	return false
}

// backend is one LB backend as `appliance run`'s /status shows it.
type backend struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Backup bool   `json:"backup"`
}

// pool reads the LB pool name ("api", "mcs") from n's admin listener.
func pool(n *netlab.Node, name string) ([]backend, error) {
	code, body, _, err := get(n, adminListen, "localhost", "/status", false, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/status: %d", code)
	}
	var st struct {
		LB struct {
			Pools map[string][]backend `json:"pools"`
		} `json:"lb"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, fmt.Errorf("/status: %w", err)
	}
	p := st.LB.Pools[name]
	sort.Slice(p, func(i, j int) bool { return p[i].Name < p[j].Name })
	return p, nil
}

func poolString(p []backend) string {
	s := make([]string, len(p))
	for i, b := range p {
		s[i] = b.Name + " " + b.State
		if b.Backup {
			s[i] += " (backup)"
		}
	}
	return strings.Join(s, ", ")
}

func poolUp(p []backend, name string) bool {
	for _, b := range p {
		if b.Name == name {
			return b.State == "up"
		}
	}
	return false
}

// call is one API call of the client.
type call struct {
	at     time.Time
	node   string // who answered; "" when the call failed
	broken bool   // connected, then reset: in flight while the VIP moved
	err    string
}

// caller calls GET /version on the API through the VIP from the client,
// one new connection per call, and records every call.
type caller struct {
	epoch time.Time // the lab's start, which error lines count from
	mu    sync.Mutex
	calls []call
	stop  chan struct{}
	done  chan struct{}
}

func startCaller(from *netlab.Node, addr string, every, timeout time.Duration, epoch time.Time) *caller {
	c := &caller{stop: make(chan struct{}), done: make(chan struct{}), epoch: epoch}
	go func() {
		defer close(c.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			at := time.Now()
			code, body, _, err := get(from, addr, "api."+Domain, "/version", true, timeout)
			cl := call{at: at}
			var v struct {
				Node string `json:"node"`
			}
			switch {
			case err != nil:
				cl.err = err.Error()
				// A reset, even during the handshake, means a holder of
				// the VIP took the connection and the VIP moved before
				// it ended: the new holder has no state for it.
				cl.broken = errors.Is(err, syscall.ECONNRESET)
			case code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || v.Node == "":
				cl.err = fmt.Sprintf("status %d: %s", code, body)
			default:
				cl.node = v.Node
			}
			c.mu.Lock()
			c.calls = append(c.calls, cl)
			c.mu.Unlock()
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

func (c *caller) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// tally counts the calls made since from.
type tally struct {
	ok, failed, broken int
	by                 map[string]int
	errs               []string
	outage             time.Duration // longest time from a failed call to the next answered one
}

func (c *caller) since(from time.Time) tally {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := tally{by: map[string]int{}}
	var down time.Time
	for _, cl := range c.calls {
		if cl.at.Before(from) {
			continue
		}
		switch {
		case cl.node != "":
			t.ok++
			t.by[cl.node]++
			if !down.IsZero() {
				t.outage = max(t.outage, cl.at.Sub(down))
				down = time.Time{}
			}
			continue
		case cl.broken:
			t.broken++
		default:
			t.failed++
		}
		t.errs = append(t.errs, fmt.Sprintf("call at %.3fs: %s", cl.at.Sub(c.epoch).Seconds(), cl.err))
		if down.IsZero() {
			down = cl.at
		}
	}
	if !down.IsZero() {
		t.outage = max(t.outage, time.Since(down))
	}
	return t
}

func (t tally) String() string {
	names := make([]string, 0, len(t.by))
	for n := range t.by {
		names = append(names, n)
	}
	sort.Strings(names)
	by := make([]string, len(names))
	for i, n := range names {
		by[i] = fmt.Sprintf("%s %d", n, t.by[n])
	}
	s := fmt.Sprintf("%d answered", t.ok)
	if len(by) > 0 {
		s += " (" + strings.Join(by, ", ") + ")"
	}
	return s + fmt.Sprintf(", %d failed, %d reset in flight", t.failed, t.broken)
}
