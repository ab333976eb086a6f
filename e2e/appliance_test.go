package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"appliance/internal/apptest"
	"appliance/internal/netlab"
)

// labVIP is the API VIP the labs' nodes hold.
var labVIP = netip.MustParseAddr("192.168.126.5")

// envHTTP makes this test binary a tiny HTTP server answering 200 on the
// address it names, for the VIP tracking tests: a process of its own in a
// node, which the test kills to fail the check.
const envHTTP = "APPLIANCE_TEST_HTTP_LISTEN"

// binDir holds the appliance binary built for this test binary; TestMain
// removes it at the end.
var binDir string

func TestMain(m *testing.M) {
	if addr := os.Getenv(envHTTP); addr != "" {
		err := http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "ok")
		}))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A race in an appliance process ends it, so the test fails there
	// rather than the report going unread in a log.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "halt_on_error=1")
	}
	dir, err := os.MkdirTemp("", "appliance-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	builtExe  string // "" until a build succeeded
)

// appliance is the appliance binary (internal/apptest.BuildChecked: the
// shipped build, or under go test -race one with the race detector, whose
// first race ends the process: GORACE is set in TestMain), built by the
// first test that asks and shared by every test of this binary. A failed
// build fails that test; the others fail at once without building again.
func appliance(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		// Build puts the binary in t's temporary folder, which goes when t
		// ends; it is moved to one that lasts as long as the test binary.
		bin := apptest.BuildChecked(t)
		dst := filepath.Join(binDir, "appliance")
		if err := os.Rename(bin, dst); err != nil {
			t.Fatalf("keep the appliance binary: %v", err)
		}
		builtExe = dst
	})
	if builtExe == "" {
		t.Fatal("the appliance binary did not build (see the first test that asked for it)")
	}
	return builtExe
}

// startAppliance runs `appliance ARGS...` inside node and returns the process;
// the lab kills it on cleanup.
func startAppliance(t testing.TB, n *netlab.Node, args ...string) *netlab.Process {
	t.Helper()
	return startApplianceAt(t, n, "debug", args...)
}

// startApplianceQuiet is startAppliance at log level info.
func startApplianceQuiet(t testing.TB, n *netlab.Node, args ...string) *netlab.Process {
	t.Helper()
	return startApplianceAt(t, n, "info", args...)
}

func startApplianceAt(t testing.TB, n *netlab.Node, level string, args ...string) *netlab.Process {
	t.Helper()
	full := append([]string{"--log-format", "text", "--log-level", level}, args...)
	p, err := n.Start(context.Background(), appliance(t), full...)
	if err != nil {
		t.Fatalf("start appliance on %s: %v", n.Name, err)
	}
	return p
}

// startHTTP runs a plain HTTP server answering 200 inside node.
func startHTTP(t testing.TB, n *netlab.Node, addr string) *netlab.Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := n.Start(context.Background(), "env", envHTTP+"="+addr, exe)
	if err != nil {
		t.Fatalf("start HTTP server on %s: %v", n.Name, err)
	}
	return p
}

// holds reports whether node has vip on its lab interface.
func holds(t testing.TB, n *netlab.Node, vip netip.Addr) bool {
	t.Helper()
	h, err := n.Handle()
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", n.Name, err)
	}
	defer h.Close()
	link, err := h.LinkByName(n.Iface)
	if err != nil {
		t.Fatalf("%s: link %s: %v", n.Name, n.Iface, err)
	}
	fam := netlink.FAMILY_V4
	if vip.Is6() {
		fam = netlink.FAMILY_V6
	}
	addrs, err := h.AddrList(link, fam)
	if err != nil {
		t.Fatalf("%s: addresses: %v", n.Name, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == vip {
			return true
		}
	}
	return false
}

// holders lists the indexes of the nodes that hold vip.
func holders(t testing.TB, nodes []*netlab.Node, vip netip.Addr) []int {
	t.Helper()
	var out []int
	for _, n := range nodes {
		if holds(t, n, vip) {
			out = append(out, n.Index)
		}
	}
	return out
}

// waitOneHolder waits until exactly one of nodes holds vip, and it stays so
// for settle; it returns that node's index.
func waitOneHolder(t testing.TB, nodes []*netlab.Node, vip netip.Addr, timeout, settle time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var stableSince time.Time
	last := -1
	var got []int
	for time.Now().Before(deadline) {
		got = holders(t, nodes, vip)
		if len(got) == 1 {
			if got[0] != last {
				last, stableSince = got[0], time.Now()
			}
			if time.Since(stableSince) >= settle {
				return last
			}
		} else {
			last = -1
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("want exactly one of %d nodes holding %s for %s within %s; holders now %v",
		len(nodes), vip, settle, timeout, got)
	return -1
}

// waitHolder waits until node want (an index into the lab) is the only one of
// nodes holding vip, and stays so for settle.
func waitHolder(t testing.TB, nodes []*netlab.Node, vip netip.Addr, want int, timeout, settle time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var since time.Time
	var got []int
	for time.Now().Before(deadline) {
		got = holders(t, nodes, vip)
		if len(got) == 1 && got[0] == want {
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= settle {
				return
			}
		} else {
			since = time.Time{}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("want n%d alone holding %s for %s within %s; holders now %v", want, vip, settle, timeout, got)
}

// dumpOnFailure prints each process's output when the test failed.
func dumpOnFailure(t *testing.T, procs map[string]*netlab.Process) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for name, p := range procs {
			out := p.Output()
			if len(out) > 6000 {
				out = "...\n" + out[len(out)-6000:]
			}
			t.Logf("---- %s output ----\n%s", name, out)
		}
	})
}

// nodeHTTPGet fetches path from addr inside node's namespace: the connection
// is opened on a thread inside the namespace, then used from here.
func nodeHTTPGet(n *netlab.Node, addr, path string) (string, error) {
	c, err := n.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("dial %s in %s: %w", addr, n.Name, err)
	}
	tr := &http.Transport{
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return c, nil },
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// writeFile writes content into a fresh file in t.TempDir.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := writeFileAt(p, content); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFileAt(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// prefixOf is the VIP with the lab's prefix length.
func prefixOf(lab *netlab.Lab, vip netip.Addr) string {
	return netip.PrefixFrom(vip, lab.Nodes[0].IPv4.Bits()).String()
}

// freePort is unused by any test process in a fresh namespace; namespaces do
// not share ports, so a constant is enough.
const freePort = "127.0.0.1:18080"
