package preflight

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// queryTimeout bounds one DNS exchange; a resolver slower than this is as
// good as absent for an installing node.
const queryTimeout = 2 * time.Second

// Query asks resolver for name's records of qtype (dns.TypeA, TypeAAAA or
// TypePTR), retrying over TCP when the answer is truncated.
func Query(ctx context.Context, resolver netip.AddrPort, name string, qtype uint16) DNSAnswer {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = true
	c := &dns.Client{Net: "udp", Timeout: queryTimeout}
	r, _, err := c.ExchangeContext(ctx, m, resolver.String())
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.ExchangeContext(ctx, m, resolver.String())
	}
	if err != nil {
		return DNSAnswer{Err: fmt.Errorf("query %s %s: %w", dns.TypeToString[qtype], name, err)}
	}
	ans := DNSAnswer{Rcode: dns.RcodeToString[r.Rcode]}
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			if a, ok := netip.AddrFromSlice(v.A); ok && qtype == dns.TypeA {
				ans.Addrs = append(ans.Addrs, a.Unmap())
			}
		case *dns.AAAA:
			if a, ok := netip.AddrFromSlice(v.AAAA); ok && qtype == dns.TypeAAAA {
				ans.Addrs = append(ans.Addrs, a)
			}
		case *dns.PTR:
			ans.Names = append(ans.Names, strings.TrimSuffix(v.Ptr, "."))
		}
	}
	return ans
}

// LookupName asks for both families of name, at once so a silent
// resolver costs one timeout, not two.
func LookupName(ctx context.Context, resolver netip.AddrPort, name string) NameObservation {
	o := NameObservation{Resolver: resolver.String(), Name: name}
	var wg sync.WaitGroup
	wg.Go(func() { o.AAAA = Query(ctx, resolver, name, dns.TypeAAAA) })
	o.A = Query(ctx, resolver, name, dns.TypeA)
	wg.Wait()
	return o
}

// LookupPTR asks for addr's PTR records.
func LookupPTR(ctx context.Context, resolver netip.AddrPort, addr netip.Addr) PTRObservation {
	rev, err := dns.ReverseAddr(addr.String())
	if err != nil {
		return PTRObservation{Resolver: resolver.String(), Addr: addr, Answer: DNSAnswer{Err: err}}
	}
	return PTRObservation{Resolver: resolver.String(), Addr: addr, Answer: Query(ctx, resolver, rev, dns.TypePTR)}
}

// ResolversFrom reads the nameservers of a resolv.conf-format file.
func ResolversFrom(path string) ([]netip.AddrPort, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read resolvers from %s: %w", path, err)
	}
	var out []netip.AddrPort
	for _, s := range cc.Servers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.WithZone(""), 53))
	}
	return out, nil
}
