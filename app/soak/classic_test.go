package soak

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"appliance/internal/netlab"
)

// classicCluster is the soak's six nodes and two upstreams, addresses
// only: enough for the classic stack's files.
func classicCluster() *cluster {
	c := &cluster{}
	for i, x := range []struct{ name, role string }{{"bootstrap", roleBootstrap}, {"master-0", roleMaster}, {"master-1", roleMaster},
		{"master-2", roleMaster}, {"worker-0", roleWorker}, {"worker-1", roleWorker}} {
		n := &netlab.Node{Name: fmt.Sprintf("n%d", i), IPv4: netip.MustParsePrefix(fmt.Sprintf("192.168.126.%d/24", 10+i))}
		c.nodes = append(c.nodes, &node{name: x.name, role: x.role, n: n})
	}
	for i := range 2 {
		c.ups = append(c.ups, &upstream{addr: netip.MustParseAddr(fmt.Sprintf("192.168.126.%d", 18+i))})
	}
	return c
}

// The keepalived.conf of each role passes keepalived's own config test,
// with the templates' priorities, checks and peers; haproxy.cfg passes
// haproxy -c.
func TestClassicConfigsPassTheirPrograms(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (a network namespace for keepalived's config test); CI=true, so this fails")
		}
		t.Skip("needs root (a network namespace for keepalived's config test)")
	}
	for _, tool := range []string{"keepalived", "haproxy"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (make test-deps installs it)", tool)
			}
			t.Skipf("%s is not installed (make test-deps installs it)", tool)
		}
	}
	c := classicCluster()
	s := &classicServices{dir: t.TempDir(), rendered: map[string]string{}}
	want := map[string][]string{
		"bootstrap": {"priority 40", "chk_ocp\n", "weight 50", "auth_pass ocp4_api\n", "192.168.126.5/24",
			"unicast_src_ip 192.168.126.10", "192.168.126.11\n", "192.168.126.13\n"},
		"master-1": {"priority 40", "chk_ocp_lb", "weight 20", "chk_ocp_both", "weight 5", "rise 3", "fall 3",
			"unicast_src_ip 192.168.126.12", "192.168.126.10\n", "interface br-ex"},
		"worker-0": {"priority 20", "chk_default_ingress", "weight 50", "chk_ingress_ready", "weight 10", "192.168.126.6/24",
			"auth_pass ocp4_ing\n", "unicast_src_ip 192.168.126.14", "192.168.126.15\n"},
	}
	for _, nd := range c.nodes {
		ifc := "eth0"
		if nd.name == "master-1" {
			ifc = "br-ex"
		}
		if err := s.writeKeepalived(c, nd, ifc); err != nil {
			t.Fatal(err)
		}
		conf := s.path("keepalived-" + nd.name + ".conf")
		b, _ := os.ReadFile(conf)
		for _, w := range want[nd.name] {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s's keepalived.conf lacks %q:\n%s", nd.name, w, b)
			}
		}
		if strings.Contains(string(b), "        "+nd.addr().String()+"\n") {
			t.Errorf("%s lists itself as a unicast peer:\n%s", nd.name, b)
		}
		if s.rendered[nd.name] != ifc {
			t.Errorf("%s: rendered for %q, want %q", nd.name, s.rendered[nd.name], ifc)
		}
		// --config-test checks the syntax, the values and the scripts'
		// safety; the interfaces exist in a namespace of its own.
		for name, script := range checkScripts(nd, s.path("redirect-"+nd.name)) {
			if err := os.WriteFile(s.path(name+"-"+nd.name+".sh"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		logf := filepath.Join(s.dir, "kt-"+nd.name+".log")
		out, err := exec.Command("unshare", "--net", "sh", "-c", "ip link add eth0 type veth peer name peer0 && ip link add br-ex type bridge && "+
			"exec keepalived --config-test="+logf+" -f "+conf).CombinedOutput()
		log, _ := os.ReadFile(logf)
		if err != nil {
			b, _ := os.ReadFile(conf)
			t.Errorf("keepalived --config-test %s: %v\n%s%s\n%s", nd.name, err, out, log, b)
		}
	}
	cfg := filepath.Join(s.dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyCfg(c, filepath.Join(s.dir, "h.sock"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("haproxy", "-c", "-f", cfg).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(cfg)
	for _, nd := range c.nodes {
		line := fmt.Sprintf("server %s %s:6443 ", nd.name, nd.addr())
		if strings.Contains(string(b), line) != nd.controlPlane() {
			t.Errorf("haproxy.cfg: %q present %v, want %v", line, !nd.controlPlane(), nd.controlPlane())
		}
	}
}

// The CoreDNS monitor writes the Kubernetes Nodes into hosts beside the
// configured ones, and leaves the file alone when nothing changed (so
// CoreDNS's reload has nothing to do).
func TestClassicCorefileFollowsTheNodes(t *testing.T) {
	c := classicCluster()
	s := &classicServices{dir: t.TempDir(), rendered: map[string]string{}}
	if err := s.writeCorefile(c, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(s.path("Corefile"))
	for _, w := range []string{"192.168.126.11 master-0 master-0.ocp4.example.com", "forward . 192.168.126.18 192.168.126.19 {",
		"policy sequential", "match ^api-int.ocp4.example.com", "in {{ .Type }} 192.168.126.5", "match .*[.]apps.ocp4.example.com",
		"in {{ .Type }} 192.168.126.6", "cache 30", "reload"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("Corefile lacks %q:\n%s", w, b)
		}
	}
	if strings.Contains(string(b), "worker-d1") {
		t.Fatal("a day-2 Node before the API listed it")
	}
	day2 := map[string]netip.Addr{"worker-d1": netip.MustParseAddr("192.168.126.40")}
	if err := s.writeCorefile(c, day2); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(s.path("Corefile"))
	if !strings.Contains(string(b), "192.168.126.40 worker-d1 worker-d1.ocp4.example.com") {
		t.Fatalf("the day-2 Node is not in hosts:\n%s", b)
	}
	st, _ := os.Stat(s.path("Corefile"))
	if err := os.Chmod(s.path("Corefile"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.writeCorefile(c, day2); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(s.path("Corefile")); st2.Mode() != 0o600 || !st2.ModTime().Equal(st.ModTime()) {
		t.Error("the Corefile was written again though nothing changed")
	}
}

// The haproxy monitor's redirect follows runtimecfg's stabilisation: on
// after 3 good checks in a row, off after 11 bad ones, a lone flip
// changing nothing.
func TestHAProxyMonitorStabilises(t *testing.T) {
	m := &haproxyMonitor{}
	steps := []struct {
		ok, want bool
	}{
		{true, false}, {true, false}, {false, false}, // a bad check restarts the count
		{true, false}, {true, false}, {true, true}, // three in a row
	}
	for range 10 {
		steps = append(steps, struct{ ok, want bool }{false, true})
	}
	steps = append(steps, struct{ ok, want bool }{true, true}) // ten bad, one good: still on
	for range 10 {
		steps = append(steps, struct{ ok, want bool }{false, true})
	}
	steps = append(steps, struct{ ok, want bool }{false, false}) // the eleventh in a row
	for i, st := range steps {
		if got := m.observe(st.ok); got != st.want {
			t.Fatalf("check %d (ok %v): healthy %v, want %v", i, st.ok, got, st.want)
		}
	}
}
