package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// runPreflightCmd runs `appliance preflight ARGS...` in-process and returns
// its standard output alone, as a script would read it.
func runPreflightCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--log-format", "text", "--log-level", "warn", "preflight"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

type jsonResult struct {
	ID      string          `json:"id"`
	Status  string          `json:"status"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details"`
}

func decodeResults(t *testing.T, out string) []jsonResult {
	t.Helper()
	var rs []jsonResult
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("-o json output is not a JSON list: %v\n%s", err, out)
	}
	return rs
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "appliance.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPreflightJSONBadConfig: a config that does not load is the first,
// failed check, naming the field; the rest are skipped; the exit is an error.
func TestPreflightJSONBadConfig(t *testing.T) {
	path := writeConfig(t, "cluster: {name: Ocp4, baseDomain: example.com}\nnetwork: {machineCIDR: 198.51.100.0/24, apiVIPs: [198.51.100.5]}\n")
	out, err := runPreflightCmd(t, "--config", path, "-o", "json")
	if !errors.Is(err, errChecksFailed) {
		t.Errorf("error %v, want errChecksFailed (exit status 1)", err)
	}
	rs := decodeResults(t, out)
	if len(rs) < 2 || rs[0].ID != "config" || rs[0].Status != "fail" || !strings.Contains(rs[0].Message, "cluster.name") {
		t.Fatalf("first result %+v, want config failing on cluster.name", rs[0])
	}
	var problems []map[string]string
	if err := json.Unmarshal(rs[0].Details, &problems); err != nil || problems[0]["field"] != "cluster.name" {
		t.Errorf("details %s, want the problems by field", rs[0].Details)
	}
	for _, r := range rs[1:] {
		if r.Status != "skipped" || r.Message == "" {
			t.Errorf("%s: %s %q, want skipped with a reason", r.ID, r.Status, r.Message)
		}
	}
}

// TestPreflightInstallerMachine: on a machine off the machine network (this
// test's own namespace), the segment and node checks are skipped with a
// reason, DNS is checked through --resolver, and a clean result exits 0.
func TestPreflightInstallerMachine(t *testing.T) {
	const domain = "ocp4.example.com."
	records := map[string]string{
		"api." + domain: "198.51.100.5", "api-int." + domain: "198.51.100.5",
		"master-0." + domain: "198.51.100.10", "10.100.51.198.in-addr.arpa.": "master-0." + domain,
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name, qt := strings.ToLower(q.Question[0].Name), q.Question[0].Qtype
		v, ok := records[name]
		if strings.HasSuffix(name, ".apps."+domain) {
			v, ok = "198.51.100.6", true
		}
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case qt == dns.TypeA && net.ParseIP(v) != nil:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(v)})
		case qt == dns.TypePTR:
			m.Answer = append(m.Answer, &dns.PTR{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: 30}, Ptr: v})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })

	path := writeConfig(t, `cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 198.51.100.0/24, apiVIPs: [198.51.100.5], ingressVIPs: [198.51.100.6]}
nodes:
  - {name: master-0, role: master, ips: [198.51.100.10]}
`)
	out, err := runPreflightCmd(t, "--config", path, "-o", "json", "--resolver", pc.LocalAddr().String(), "--node", "")
	if err != nil {
		t.Errorf("exit error %v with nothing failing:\n%s", err, out)
	}
	rs := decodeResults(t, out)
	byID := map[string]jsonResult{}
	for _, r := range rs {
		byID[r.ID] = r
	}
	for _, id := range []string{"config", "placement", "dns.api", "dns.api-int", "dns.apps", "dns.wildcard", "dns.node.master-0", "dns.ptr.master-0"} {
		if byID[id].Status != "pass" {
			t.Errorf("%s: %s %q, want pass", id, byID[id].Status, byID[id].Message)
		}
	}
	for _, id := range []string{"vip-free.api-v4", "dhcp-rogue", "vrrp-vrid", "port", "node-ip"} {
		if r := byID[id]; r.Status != "skipped" || !strings.Contains(r.Message, "machine") {
			t.Errorf("%s: %s %q, want skipped saying why", id, r.Status, r.Message)
		}
	}
	if r := byID["mtu"]; r.Status != "skipped" || !strings.Contains(r.Message, "network.gateway") {
		t.Errorf("mtu: %s %q, want skipped for want of a gateway", r.Status, r.Message)
	}

	text, _ := runPreflightCmd(t, "--config", path, "--resolver", pc.LocalAddr().String())
	if !strings.Contains(text, "PASS    dns.api ") || !strings.Contains(text, "0 failed") {
		t.Errorf("text report:\n%s", text)
	}
}

func TestPreflightFlags(t *testing.T) {
	if _, err := runPreflightCmd(t); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("no --config: %v", err)
	}
	path := writeConfig(t, "x: 1\n")
	if _, err := runPreflightCmd(t, "--config", path, "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "text or json") {
		t.Errorf("-o yaml: %v", err)
	}
	if _, err := runPreflightCmd(t, "--config", path, "--resolver", "dns.example"); err == nil || !strings.Contains(err.Error(), "--resolver") {
		t.Errorf("--resolver dns.example: %v", err)
	}
	for in, want := range map[string]string{"192.0.2.1": "192.0.2.1:53", "192.0.2.1:5353": "192.0.2.1:5353", "[fd00::1]:53": "[fd00::1]:53", "fd00::1": "[fd00::1]:53"} {
		if ap, err := parseResolver(in); err != nil || ap.String() != want {
			t.Errorf("parseResolver(%q) = %v, %v; want %s", in, ap, err, want)
		}
	}
}

// TestPreflightUnknownNode: a --node that is not in the config fails rather
// than passing off as "not a node".
func TestPreflightUnknownNode(t *testing.T) {
	path := writeConfig(t, `cluster: {name: ocp4, baseDomain: example.com}
network: {machineCIDR: 198.51.100.0/24, apiVIPs: [198.51.100.5]}
nodes:
  - {name: master-0, role: master, ips: [198.51.100.10]}
`)
	out, err := runPreflightCmd(t, "--config", path, "-o", "json", "--node", "master-9", "--resolver", "127.0.0.1:1", "--timeout", "2s")
	if !errors.Is(err, errChecksFailed) {
		t.Errorf("error %v, want errChecksFailed", err)
	}
	found := false
	for _, r := range decodeResults(t, out) {
		if r.ID == "port" {
			found = true
			if r.Status != "fail" || !strings.Contains(r.Message, "master-9") {
				t.Errorf("port: %s %q, want a failure naming master-9", r.Status, r.Message)
			}
		}
	}
	if !found {
		t.Errorf("no port check in\n%s", out)
	}
}
