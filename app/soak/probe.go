package soak

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/netlab"
)

// adminGet asks n's admin listener for path.
func adminGet(n *netlab.Node, path string, timeout time.Duration) (int, string, error) {
	return httpGet(n, adminListen, path, false, timeout)
}

// httpsGet asks addr in nd for path over TLS, unverified (the stand-ins'
// throw-away certificates).
func httpsGet(nd *node, addr, path string, timeout time.Duration) (int, string, error) {
	return httpGet(nd.n, addr, path, true, timeout)
}

// httpGet asks addr in n for path, one request on a connection of its own.
func httpGet(n *netlab.Node, addr, path string, overTLS bool, timeout time.Duration) (int, string, error) {
	raw, err := n.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, "", err
	}
	var c net.Conn = raw
	if overTLS {
		c = tlsClient(raw)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, string(b), err
}

// tlsClient wraps a connection to the stand-ins, whose throw-away
// certificates are not verified.
func tlsClient(c net.Conn) *tls.Conn {
	return tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "api." + Domain}) // stand-ins' throw-away certificates
}

// resolver asks one DNS server from the client node over one UDP socket,
// one question at a time.
type resolver struct {
	mu   sync.Mutex
	conn net.Conn
	from *netlab.Node
	to   string
}

func newResolver(from *netlab.Node, server netip.Addr) *resolver {
	return &resolver{from: from, to: netip.AddrPortFrom(server, 53).String()}
}

// ask sends q and returns the answer; a socket that failed is opened
// again on the next question.
func (r *resolver) ask(q *dns.Msg, timeout time.Duration) (*dns.Msg, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		c, err := r.from.DialTimeout("udp", r.to, 0)
		if err != nil {
			return nil, err
		}
		r.conn = c
	}
	dc := &dns.Conn{Conn: r.conn}
	_ = r.conn.SetDeadline(time.Now().Add(timeout))
	if err := dc.WriteMsg(q); err != nil {
		r.reset()
		return nil, err
	}
	for {
		m, err := dc.ReadMsg()
		if err != nil {
			r.reset()
			return nil, err
		}
		if m.Id == q.Id {
			return m, nil
		}
		// A late answer to an earlier question that timed out.
	}
}

func (r *resolver) reset() {
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}

func (r *resolver) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reset()
}

// upstream is a stand-in for the site's DNS server: it answers every name
// under upstream.test with forwardedA and nothing else, from a node of its
// own, so a fault can black-hole it.
type upstream struct {
	name string
	n    *netlab.Node
	addr netip.Addr
	srv  *dns.Server
	done chan struct{}
}

// upstreamZone is the zone the upstream servers answer.
const upstreamZone = "upstream.test."

func startUpstream(n *netlab.Node, name string) (*upstream, error) {
	var pc net.PacketConn
	if err := n.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", ":53")
		return err
	}); err != nil {
		return nil, fmt.Errorf("soak: %s: %w", name, err)
	}
	u := &upstream{name: name, n: n, addr: n.IPv4.Addr(), done: make(chan struct{})}
	mux := dns.NewServeMux()
	mux.HandleFunc(".", func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if len(q.Question) == 1 && dns.IsSubDomain(upstreamZone, strings.ToLower(q.Question[0].Name)) {
			if q.Question[0].Qtype == dns.TypeA {
				m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
					A: forwardedA.AsSlice()}}
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	u.srv = &dns.Server{PacketConn: pc, Handler: mux}
	go func() {
		defer close(u.done)
		_ = u.srv.ActivateAndServe()
	}()
	return u, nil
}

func (u *upstream) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = u.srv.ShutdownContext(ctx)
	<-u.done
}
