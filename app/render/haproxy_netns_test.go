package render

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// standIn is a stand-in kube-apiserver: HTTPS on addr:6443, /readyz answers
// 200 or 500 as told, every other path answers the server's name.
type standIn struct {
	name    string
	healthy atomic.Bool
	mu      sync.Mutex
	checks  map[string]int // path -> health checks seen
}

func startStandIn(t *testing.T, n *netlab.Node, name, addr string, healthy bool) *standIn {
	t.Helper()
	s := &standIn{name: name, checks: map[string]int{}}
	s.healthy.Store(healthy)
	var ln net.Listener
	if err := n.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" || r.URL.Path == "/healthz" {
			s.mu.Lock()
			s.checks[r.URL.Path]++
			s.mu.Unlock()
			if !s.healthy.Load() {
				http.Error(w, "not ready", http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, "ok")
			return
		}
		fmt.Fprint(w, s.name)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // haproxy's checks hang up after the status line
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return s
}

func (s *standIn) checked(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checks[path]
}

// apiCall makes one API request through haproxy on a new connection and
// returns the name of the stand-in that answered.
func apiCall(n *netlab.Node, addr string) (string, error) {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			var c net.Conn
			err := n.Do(func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, a)
				return err
			})
			return c, err
		},
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/api/v1/namespaces")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestHAProxySendsAPICallsOnlyToReadyServers: haproxy from the rendered
// config, in a namespace, in front of stand-in apiservers in another; API
// calls reach only the masters whose /readyz passes, and the bootstrap node
// only while no master does; Machine Config Server calls only those whose
// /healthz passes.
func TestHAProxySendsAPICallsOnlyToReadyServers(t *testing.T) {
	need(t, "haproxy")
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "rhaproxy"})
	lb, srv := lab.Nodes[0], lab.Nodes[1]
	// The stand-ins all live in srv's namespace, one address each.
	addrs := map[string]string{"bootstrap": "192.168.126.9", "master-0": srv.IPv4.Addr().String(),
		"master-1": "192.168.126.12", "master-2": "192.168.126.13"}
	for _, name := range []string{"bootstrap", "master-1", "master-2"} {
		if _, err := srv.Run(context.Background(), "ip", "addr", "add", addrs[name]+"/24", "dev", "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	var nodes strings.Builder
	for _, name := range []string{"bootstrap", "master-0", "master-1", "master-2"} {
		role, _, _ := strings.Cut(name, "-")
		fmt.Fprintf(&nodes, "  - {name: %s, role: %s, ips: [%s]}\n", name, role, addrs[name])
	}
	nodes.WriteString("  - {name: worker-0, role: worker, ips: [192.168.126.20]}\n")
	out := renderCfg(t, labConfig(t, lab, nodes.String(), ""))

	standIns, mcs := map[string]*standIn{}, map[string]*standIn{}
	for name, a := range addrs {
		// master-2 is never ready: it must never get a call.
		standIns[name] = startStandIn(t, srv, name, a+":6443", name != "master-2")
		// The Machine Config Server of master-1 fails its /healthz.
		mcs[name] = startStandIn(t, srv, "mcs-"+name, a+":22623", name != "master-1")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := lb.Start(ctx, "haproxy", "-db", "-f", filepath.Join(out, "haproxy", "haproxy.cfg")); err != nil {
		t.Fatal(err)
	}
	api, mcsAddr := lb.IPv4.Addr().String()+":6443", lb.IPv4.Addr().String()+":22623"

	// calls makes n calls to addr and counts who answered.
	calls := func(addr string, n int) map[string]int {
		got := map[string]int{}
		for range n {
			name, err := apiCall(lb, addr)
			if err != nil {
				got["error: "+err.Error()]++
				continue
			}
			got[name]++
		}
		return got
	}
	// settle waits until a round of calls is answered by exactly want
	// (haproxy needs a few checks to notice a change), then checks that
	// the next rounds stay that way.
	settle := func(addr, step string, want ...string) {
		t.Helper()
		same := func(got map[string]int) bool {
			if len(got) != len(want) {
				return false
			}
			for _, w := range want {
				if got[w] == 0 {
					return false
				}
			}
			return true
		}
		deadline := time.Now().Add(15 * time.Second)
		var got map[string]int
		for got = calls(addr, 12); !same(got); got = calls(addr, 12) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: calls went to %v, want only %v", step, got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got = calls(addr, 30); !same(got) {
			t.Fatalf("%s: once settled, calls went to %v, want only %v", step, got, want)
		}
	}

	settle(mcsAddr, "MCS: master-1 fails /healthz", "mcs-master-0", "mcs-master-2")
	settle(api, "all ready but master-2", "master-0", "master-1")
	standIns["master-1"].healthy.Store(false)
	settle(api, "master-1 fails /readyz", "master-0")
	standIns["master-0"].healthy.Store(false)
	settle(api, "no master ready: the bootstrap node is the backup", "bootstrap")
	standIns["master-2"].healthy.Store(true)
	settle(api, "master-2 ready at last: the backup is left", "master-2")

	for name, s := range standIns {
		if s.checked("/readyz") == 0 || s.checked("/healthz") != 0 {
			t.Errorf("%s: %d /readyz and %d /healthz checks; want /readyz only", name, s.checked("/readyz"), s.checked("/healthz"))
		}
	}
	for name, s := range mcs {
		if s.checked("/healthz") == 0 || s.checked("/readyz") != 0 {
			t.Errorf("MCS of %s: %d /healthz and %d /readyz checks; want /healthz only", name, s.checked("/healthz"), s.checked("/readyz"))
		}
	}
}
