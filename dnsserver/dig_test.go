package dnsserver

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/internal/cluster"
)

// digCase is one question and the reply it must get. answer lists the
// answer section as "TYPE RDATA", sorted; soa says the authority section
// carries the zone's SOA.
type digCase struct {
	name, qtype string
	rcode       string
	answer      []string
	soa         bool
}

var digCases = []digCase{
	{"api.ocp4.example.com", "A", "NOERROR", []string{"A 192.168.126.5"}, false},
	{"api.ocp4.example.com", "AAAA", "NOERROR", []string{"AAAA fd00::5"}, false},
	{"api-int.ocp4.example.com", "A", "NOERROR", []string{"A 192.168.126.5"}, false},
	{"API-Int.OCP4.example.com", "AAAA", "NOERROR", []string{"AAAA fd00::5"}, false},
	{"console-openshift-console.apps.ocp4.example.com", "A", "NOERROR", []string{"A 192.168.126.6"}, false},
	{"a.b.apps.ocp4.example.com", "A", "NOERROR", []string{"A 192.168.126.6"}, false},
	// No IPv6 ingress VIP: NODATA, never forwarded.
	{"console.apps.ocp4.example.com", "AAAA", "NOERROR", nil, true},
	{"apps.ocp4.example.com", "A", "NOERROR", nil, true},
	{"api.ocp4.example.com", "MX", "NOERROR", nil, true},
	{"master-0.ocp4.example.com", "A", "NOERROR", []string{"A 192.168.126.10"}, false},
	{"master-0.ocp4.example.com", "AAAA", "NOERROR", []string{"AAAA fd00::10"}, false},
	{"master-0", "A", "NOERROR", []string{"A 192.168.126.10"}, false},
	{"worker-0", "AAAA", "NOERROR", nil, false},
	{"worker-0.ocp4.example.com", "AAAA", "NOERROR", nil, true},
	{"nope.ocp4.example.com", "A", "NXDOMAIN", nil, true},
	{"x.master-0.ocp4.example.com", "A", "NXDOMAIN", nil, true},
	{"ocp4.example.com", "SOA", "NOERROR", []string{"SOA api-int.ocp4.example.com. hostmaster.ocp4.example.com. 1 3600 600 86400 30"}, false},
	{"ocp4.example.com", "NS", "NOERROR", []string{"NS api-int.ocp4.example.com."}, false},
	{"ocp4.example.com", "A", "NOERROR", nil, true},
	{"10.126.168.192.in-addr.arpa", "PTR", "NOERROR", []string{"PTR master-0.ocp4.example.com."}, false},
	{"5.126.168.192.in-addr.arpa", "PTR", "NOERROR", []string{"PTR api.ocp4.example.com."}, false},
	{"6.126.168.192.in-addr.arpa", "PTR", "NOERROR", []string{"PTR ingress.apps.ocp4.example.com."}, false},
	{"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa", "PTR", "NOERROR", []string{"PTR master-0.ocp4.example.com."}, false},
	{"5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa", "PTR", "NOERROR", []string{"PTR api.ocp4.example.com."}, false},
	// Not ours: forwarded to the test upstream, which answers with its address.
	{"www.example.org", "A", "NOERROR", []string{"A 192.0.2.53"}, false},
	{"99.126.168.192.in-addr.arpa", "PTR", "NOERROR", nil, false},
	{"nx.example.org", "A", "NXDOMAIN", nil, false},
}

var (
	statusRE  = regexp.MustCompile(`status: ([A-Z]+)`)
	sectionRE = regexp.MustCompile(`^;; ([A-Z]+) SECTION:`)
)

// parseDigOutput reads the status, answer and authority sections of dig's
// or kdig's default output.
func parseDigOutput(t *testing.T, out string) (rcode string, answer, authority []dns.RR) {
	t.Helper()
	section := ""
	for _, line := range strings.Split(out, "\n") {
		if m := statusRE.FindStringSubmatch(line); m != nil && rcode == "" {
			rcode = m[1]
		}
		if m := sectionRE.FindStringSubmatch(line); m != nil {
			section = m[1]
			continue
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, ";") {
			if line == "" {
				section = ""
			}
			continue
		}
		if section != "ANSWER" && section != "AUTHORITY" {
			continue
		}
		rr, err := dns.NewRR(line)
		if err != nil || rr == nil {
			t.Fatalf("unparsable record %q: %v", line, err)
		}
		if section == "ANSWER" {
			answer = append(answer, rr)
		} else {
			authority = append(authority, rr)
		}
	}
	return rcode, answer, authority
}

func rrText(rr dns.RR) string {
	return dns.TypeToString[rr.Header().Rrtype] + " " + strings.TrimPrefix(rr.String(), rr.Header().String())
}

func TestDigKdig(t *testing.T) {
	up := startUpstream(t, "192.0.2.53")
	cfg := testConfig()
	cfg.Network.UpstreamDNS = []netip.AddrPort{up.addr}
	_, addr := startServer(t, cfg, cluster.NewState(cfg), Options{})
	host, port, _ := net.SplitHostPort(addr)

	tools := map[string]func(name, qtype string, tcp bool) []string{
		"dig": func(name, qtype string, tcp bool) []string {
			a := []string{"@" + host, "-p", port, "+tries=1", "+time=3", name, qtype}
			if tcp {
				a = append(a, "+tcp")
			}
			return a
		},
		"kdig": func(name, qtype string, tcp bool) []string {
			a := []string{"@" + host, "-p", port, "+retry=0", "+time=3", name, qtype}
			if tcp {
				a = append(a, "+tcp")
			}
			return a
		},
	}
	for tool, args := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make test installs it): %v", tool, err)
		}
		for _, tcp := range []bool{false, true} {
			for _, c := range digCases {
				proto := "udp"
				if tcp {
					proto = "tcp"
				}
				t.Run(tool+"/"+proto+"/"+c.qtype+"/"+c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					out, err := exec.CommandContext(ctx, tool, args(c.name, c.qtype, tcp)...).CombinedOutput()
					if err != nil {
						t.Fatalf("%s: %v\n%s", tool, err, out)
					}
					rcode, answer, authority := parseDigOutput(t, string(out))
					var got []string
					for _, rr := range answer {
						got = append(got, rrText(rr))
					}
					slices.Sort(got)
					if rcode != c.rcode || !slices.Equal(got, c.answer) {
						t.Fatalf("got %s %q, want %s %q\n%s", rcode, got, c.rcode, c.answer, out)
					}
					hasSOA := len(authority) == 1 && authority[0].Header().Rrtype == dns.TypeSOA &&
						authority[0].Header().Name == "ocp4.example.com."
					if hasSOA != c.soa {
						t.Fatalf("authority %v, want SOA: %v\n%s", authority, c.soa, out)
					}
				})
			}
		}
	}
}
