package preflight

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// DNSAnswer is a resolver's answer to one query.
type DNSAnswer struct {
	// Rcode is the response code's name: "NOERROR", "NXDOMAIN", ...
	Rcode string `json:"rcode,omitempty"`
	// Addrs holds the A or AAAA records, Names the PTR targets (without the
	// trailing dot).
	Addrs []netip.Addr `json:"addrs,omitempty"`
	Names []string     `json:"names,omitempty"`
	// Err is set when no answer came (timeout, refused connection).
	Err error `json:"-"`
}

// NameObservation is the A and AAAA answers for one name.
type NameObservation struct {
	Resolver string
	Name     string
	A, AAAA  DNSAnswer
}

type dnsDetails struct {
	Resolver string       `json:"resolver"`
	Name     string       `json:"name"`
	Want     []netip.Addr `json:"want,omitempty"`
	Got      []netip.Addr `json:"got,omitempty"`
	Rcode    string       `json:"rcode,omitempty"`
	Error    string       `json:"error,omitempty"`
}

// DecideResolver checks that the resolver answers at all, from the first
// query (api's): when it does not, every name check would fail the same way,
// so the run reports it once and skips them. from says where the resolver
// came from (--resolver, dhcp.dns, a resolv.conf).
func DecideResolver(from string, o NameObservation) Result {
	id := IDDNS + ".resolver"
	d := dnsDetails{Resolver: o.Resolver, Name: o.Name, Rcode: o.A.Rcode}
	if o.A.Err != nil && o.AAAA.Err != nil {
		d.Error = o.A.Err.Error()
		return fail(id, "resolver %s (from %s) does not answer: %v; the nodes cannot resolve through it: start it, open port 53, or give the right one in dhcp.dns",
			o.Resolver, from, o.A.Err).with(d)
	}
	return pass(id, "resolver %s (from %s) answers", o.Resolver, from).with(d)
}

// DecideName checks that name resolves to exactly want (both families:
// a family without a wanted address must answer no address). what says
// where the addresses come from in the config, for the fix.
func DecideName(id string, o NameObservation, want []netip.Addr, what string) Result {
	d := dnsDetails{Resolver: o.Resolver, Name: o.Name, Want: want, Rcode: o.A.Rcode}
	if err := firstErr(o.A.Err, o.AAAA.Err); err != nil {
		d.Error = err.Error()
		return fail(id, "resolver %s did not answer for %s: %v; the nodes cannot resolve through it", o.Resolver, o.Name, err).with(d)
	}
	got := append(slices.Clone(o.A.Addrs), o.AAAA.Addrs...)
	d.Got = got
	if sameAddrSet(got, want) {
		return pass(id, "%s resolves to %s through %s", o.Name, joinAddrs(want), o.Resolver).with(d)
	}
	if len(got) == 0 {
		return fail(id, "%s does not resolve through %s (%s); add it with %s (%s)",
			o.Name, o.Resolver, o.A.Rcode, joinAddrs(want), what).with(d)
	}
	return fail(id, "%s resolves to %s through %s, want %s (%s); fix the record",
		o.Name, joinAddrs(got), o.Resolver, joinAddrs(want), what).with(d)
}

// PTRObservation is the answer to one reverse lookup.
type PTRObservation struct {
	Resolver string
	Addr     netip.Addr
	Answer   DNSAnswer
}

// DecidePTR checks that addr's PTR names want (a FQDN without trailing dot).
func DecidePTR(id string, o PTRObservation, want string) Result {
	d := map[string]any{"resolver": o.Resolver, "addr": o.Addr, "want": want, "got": o.Answer.Names, "rcode": o.Answer.Rcode}
	if o.Answer.Err != nil {
		return fail(id, "resolver %s did not answer the PTR query for %s: %v", o.Resolver, o.Addr, o.Answer.Err).with(d)
	}
	for _, n := range o.Answer.Names {
		if strings.EqualFold(strings.TrimSuffix(n, "."), want) {
			return pass(id, "%s has PTR %s through %s", o.Addr, want, o.Resolver).with(d)
		}
	}
	if len(o.Answer.Names) == 0 {
		return fail(id, "%s has no PTR record through %s (%s); add one naming %s", o.Addr, o.Resolver, o.Answer.Rcode, want).with(d)
	}
	return fail(id, "%s has PTR %s through %s, want %s; fix the reverse zone", o.Addr, strings.Join(o.Answer.Names, ", "), o.Resolver, want).with(d)
}

// DecideWildcard checks that a random name directly in the cluster domain
// does not resolve: a wildcard *.<cluster domain> makes every name the
// installer and the nodes look up (including ones meant to fail over to
// other names or search domains) answer with the wildcard's address.
func DecideWildcard(id, domain string, o NameObservation) Result {
	d := dnsDetails{Resolver: o.Resolver, Name: o.Name, Rcode: o.A.Rcode}
	if err := firstErr(o.A.Err, o.AAAA.Err); err != nil {
		d.Error = err.Error()
		return fail(id, "resolver %s did not answer for %s: %v", o.Resolver, o.Name, err).with(d)
	}
	got := append(slices.Clone(o.A.Addrs), o.AAAA.Addrs...)
	d.Got = got
	if len(got) > 0 {
		return fail(id, "%s, a name nobody configured, resolves to %s through %s: a wildcard covers %s; remove it (only *.apps.%s may be a wildcard)",
			o.Name, joinAddrs(got), o.Resolver, domain, domain).with(d)
	}
	return pass(id, "no wildcard in %s: %s does not resolve (%s)", domain, o.Name, o.A.Rcode).with(d)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func sameAddrSet(a, b []netip.Addr) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}

// randomLabel returns a label nobody configures, from r's bytes.
func randomLabel(prefix string, r [6]byte) string {
	return fmt.Sprintf("%s%x", prefix, r[:])
}
