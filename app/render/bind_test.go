package render

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"appliance/dnsserver"
	"appliance/internal/cluster"
	"appliance/internal/netlab/netlabtest"
)

// startNamed runs BIND's named in the foreground on a loopback port, serving
// the zones of the rendered folder out through its named.conf, which a
// site's own named.conf would include the same way.
func startNamed(t *testing.T, out string) string {
	t.Helper()
	need(t, "named")
	addr := netlabtest.FreeLoopbackAddr(t)
	ap := netip.MustParseAddrPort(addr)
	run := t.TempDir()
	conf := fmt.Sprintf(`options {
	directory %q;
	listen-on port %d { 127.0.0.1; };
	listen-on-v6 { none; };
	pid-file %q;
	session-keyfile %q;
	managed-keys-directory %q;
	recursion no;
	dnssec-validation no;
	notify no;
	// appliance dns sends no NS records with its answers; neither does this.
	minimal-responses yes;
};
controls { };
include %q;
`, filepath.Join(out, "bind"), ap.Port(), filepath.Join(run, "named.pid"), filepath.Join(run, "session.key"),
		run, filepath.Join(out, "bind", "named.conf"))
	path := filepath.Join(run, "named.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "named", "-g", "-n", "1", "-c", path)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start named: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("named output:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		m := new(dns.Msg)
		m.SetQuestion("version.bind.", dns.TypeTXT)
		m.Question[0].Qclass = dns.ClassCHAOS
		c := &dns.Client{Timeout: 200 * time.Millisecond}
		if _, _, err := c.Exchange(m, addr); err == nil {
			return addr
		}
		select {
		case <-done:
			t.Fatalf("named exited:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("named did not answer on %s:\n%s", addr, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startApplianceDNS runs `appliance dns`'s server in-process from cfg.
func startApplianceDNS(t *testing.T, cfg *cluster.Config) string {
	t.Helper()
	addr := netlabtest.FreeLoopbackAddr(t)
	s, err := dnsserver.New(cfg, cluster.NewState(cfg), dnsserver.Options{Listen: addr},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("appliance dns: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if udp, _ := s.Addr(); udp != nil {
			return udp.String()
		}
		select {
		case err := <-done:
			t.Fatalf("appliance dns ended early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("appliance dns did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clusterQuestions are every cluster name of cfg with the types worth
// asking: each name's own types, the other family, a type it never has, the
// zone apex, the empty non-terminal apps, names below *.apps, names that do
// not exist, and the PTR of every node address and VIP.
func clusterQuestions(cfg *cluster.Config) []dns.Question {
	zone := dns.Fqdn(cfg.Cluster.Domain())
	var qs []dns.Question
	ask := func(name string, types ...uint16) {
		for _, t := range types {
			qs = append(qs, dns.Question{Name: dns.Fqdn(name), Qtype: t, Qclass: dns.ClassINET})
		}
	}
	addr := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeTXT}
	ask(zone, dns.TypeSOA, dns.TypeNS, dns.TypeA, dns.TypeAAAA)
	for _, n := range []string{"api", "api-int", "API-Int", "apps", "console-openshift-console.apps",
		"oauth-openshift.apps", "a.b.apps", "*.apps", "nope", "x.api", "x.master-0", "apps.apps"} {
		ask(n+"."+zone, addr...)
	}
	for _, n := range cfg.Nodes {
		ask(n.Name+"."+zone, addr...)
		ask(strings.ToUpper(n.Name)+"."+zone, dns.TypeA)
	}
	var ips []netip.Addr
	for _, n := range cfg.Nodes {
		ips = append(ips, n.IPs...)
	}
	ips = append(ips, cfg.Network.APIVIPs...)
	ips = append(ips, cfg.Network.IngressVIPs...)
	for _, ip := range ips {
		rev, _ := dns.ReverseAddr(ip.String())
		ask(rev, dns.TypePTR)
	}
	return qs
}

// answerText is what a reply says, in a form two servers can be compared
// by: rcode, the authoritative flag, the answer records and the authority
// records, owner names lower-cased and sorted.
func answerText(m *dns.Msg) string {
	section := func(rrs []dns.RR) string {
		var s []string
		for _, rr := range rrs {
			s = append(s, strings.ToLower(rr.String()))
		}
		slices.Sort(s)
		return strings.Join(s, "\n  ")
	}
	return fmt.Sprintf("%s aa=%v\n answer:\n  %s\n authority:\n  %s", dns.RcodeToString[m.Rcode], m.Authoritative,
		section(m.Answer), section(m.Ns))
}

func exchange(t *testing.T, addr string, q dns.Question) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.Question = []dns.Question{q}
	m.Id = dns.Id()
	c := &dns.Client{Timeout: 3 * time.Second}
	var err error
	for range 3 {
		var r *dns.Msg
		if r, _, err = c.Exchange(m, addr); err == nil {
			return r
		}
	}
	t.Fatalf("%s %s to %s: %v", q.Name, dns.TypeToString[q.Qtype], addr, err)
	return nil
}

// TestNamedAnswersAsApplianceDNS serves the rendered zones with BIND and the
// same config with `appliance dns`, asks both every cluster question, and
// wants the same replies.
func TestNamedAnswersAsApplianceDNS(t *testing.T) {
	for _, name := range testCases {
		t.Run(name, func(t *testing.T) {
			cfg := mustCfg(t, name)
			out, _ := renderTo(t, name)
			named := startNamed(t, out)
			appliance := startApplianceDNS(t, cfg)
			qs := clusterQuestions(cfg)
			answered := 0
			for _, q := range qs {
				r := exchange(t, named, q)
				if len(r.Answer) > 0 {
					answered++
				}
				got, want := answerText(r), answerText(exchange(t, appliance, q))
				if got != want {
					t.Errorf("%s %s:\nnamed:     %s\nappliance: %s", q.Name, dns.TypeToString[q.Qtype], got, want)
				}
			}
			// Names, not just refusals: every node name and PTR at least.
			if answered < 3*len(cfg.Nodes) {
				t.Errorf("named answered only %d of %d questions", answered, len(qs))
			}
			t.Logf("%d questions, same replies, %d with answers", len(qs), answered)
		})
	}
}
