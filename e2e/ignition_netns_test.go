package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"appliance/bootstrap"
	"appliance/internal/cluster"
	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// ignitionBinary is Ignition itself (Debian's ignition package ships it in
// the dracut module, off PATH).
func ignitionBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("ignition"); err == nil {
		return p
	}
	const p = "/usr/lib/dracut/modules.d/30ignition/ignition"
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Ignition not found (apt-get install -y ignition)")
	}
	t.Skip("Ignition not found (apt-get install -y ignition)")
	return ""
}

// mcsCert is a self-signed server certificate for the given addresses: the
// root the pointer config carries, as the installer's root CA is.
func mcsCert(t *testing.T, addrs ...netip.Addr) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "stand-in machine config server"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, a := range addrs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// standInMCS serves /healthz and /config/<role> over TLS on addr inside
// node, remembering the Accept header of every config request.
type standInMCS struct {
	mu     sync.Mutex
	accept []string
	file   []byte
}

func (m *standInMCS) accepts() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.accept...)
}

func startStandInMCS(t *testing.T, n *netlab.Node, addr string, cert tls.Certificate) *standInMCS {
	t.Helper()
	m := &standInMCS{file: []byte("served by the stand-in machine config server\n")}
	var ln net.Listener
	// The socket belongs to the namespace it was opened in; serving it
	// from any goroutine keeps it there.
	if err := n.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /config/{role}", func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.accept = append(m.accept, r.Header.Get("Accept"))
		m.mu.Unlock()
		// The answer at 3.2.0 (every Ignition here reads it), through the
		// same merge the appliance uses, from an empty config.
		base, err := bootstrap.Merge("mcs", []byte(`{"ignition":{"version":"3.2.0"}}`),
			[]bootstrap.File{{Path: "/etc/mcs-file", Mode: 0o644, Contents: m.file}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.coreos.ignition+json")
		w.Write(base.Config)
	})
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)} // the LB's health checks hang up mid-handshake
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return m
}

// TestIgnitionPointerThroughVIP: a node boots from an edited master.ign. Its
// Ignition fetches the merge source https://<API VIP>:22623/config/master
// through the appliance's LB on the bootstrap node, to a stand-in MCS, over
// TLS verified with the pointer's CA; the Accept header arrives as it does
// when Ignition asks the MCS directly; the node gets the MCS's files and the
// appliance's. The bootstrap's appliance runs the static pod's own command
// line, and the kubelet's liveness and readiness probes, as the pod states
// them, answer 200.
func TestIgnitionPointerThroughVIP(t *testing.T) {
	ign := ignitionBinary(t)
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "ignvip"})
	boot, client := lab.Nodes[0], lab.Nodes[1]
	bootIP := boot.IPv4.Addr()
	procs := map[string]*netlab.Process{}
	dumpOnFailure(t, procs)

	cert, caPEM := mcsCert(t, labVIP, bootIP)
	mcs := startStandInMCS(t, boot, netip.AddrPortFrom(bootIP, 22623).String(), cert)
	cfgPath := writeFile(t, "appliance.yaml", fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: %s
  apiVIPs: [%s]
  ingressVIPs: [192.168.126.6]
  upstreamDNS: [192.168.126.1]
nodes:
  - {name: bootstrap, role: bootstrap, ips: [%s]}
vrrp: {advertInterval: 100ms}
`, boot.IPv4.Masked(), labVIP, bootIP))
	procs["apiserver"] = startApplianceQuiet(t, boot, "lab", "apiserver", "--listen", ":6443", "--name", "bootstrap")
	// The appliance runs the static pod's own command line (its config
	// path moved to this test's file): the node finds itself by address.
	cfg, err := cluster.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := bootstrap.StaticPod(cfg, bootstrap.PodOptions{Image: testImage, Role: cluster.RoleBootstrap, Drain: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	args := append([]string(nil), c.Args...)
	for i := range args {
		if args[i] == bootstrap.NodeConfigPath {
			args[i] = cfgPath
		}
	}
	procs["appliance"] = startApplianceQuiet(t, boot, args...)
	waitOneHolder(t, lab.Nodes, labVIP, 30*time.Second, time.Second)
	// The kubelet's probes, as the pod spec states them, answer 200.
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		g := p.HTTPGet
		addr := net.JoinHostPort(g.Host, g.Port.String())
		waitProbe(t, boot, addr, g.Path, 30*time.Second)
	}

	// The LB serves VIP:22623 once its MCS pool's health check passed.
	vipMCS := netip.AddrPortFrom(labVIP, 22623).String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := client.DialTimeout("tcp", vipMCS, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("VIP:22623 never answered: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	ca := "data:text/plain;charset=utf-8;base64," + base64.StdEncoding.EncodeToString(caPEM)
	var edited string // the last master.ign `appliance ignition` edited
	fetch := func(t *testing.T, host, version string) (root string) {
		dir := t.TempDir()
		pointer := fmt.Sprintf(`{"ignition":{"config":{"merge":[{"source":"https://%s/config/master"}]},"security":{"tls":{"certificateAuthorities":[{"source":"%s"}]}},"version":"%s"}}`, host, ca, version)
		os.WriteFile(filepath.Join(dir, "master.ign"), []byte(pointer), 0o600)
		if out, err := exec.Command(appliance(t), "ignition", "--config", cfgPath, "--assets", dir, "--image", testImage).CombinedOutput(); err != nil {
			t.Fatalf("appliance ignition: %v\n%s", err, out)
		}
		edited = filepath.Join(dir, "master.ign")
		root = scratchRoot(t)
		run := t.TempDir()
		stub := filepath.Join(run, "bin")
		os.MkdirAll(stub, 0o755)
		os.WriteFile(filepath.Join(stub, "setfiles"), []byte("#!/bin/sh\nexit 0\n"), 0o755) // SELinux is off in the scratch root
		for _, stage := range []string{"fetch", "files"} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := client.Run(ctx, "env", "-i", "PATH="+stub+":/usr/sbin:/usr/bin:/sbin:/bin", "HOME="+run,
				"IGNITION_CONFIG_FILE="+filepath.Join(dir, "master.ign"),
				ign, "-platform", "file", "-stage", stage, "-root", root, "-log-to-stdout", "-fetch-timeout", "20s",
				"-config-cache", filepath.Join(run, "ignition.json"), "-state-file", filepath.Join(run, "state"),
				"-neednet", filepath.Join(run, "neednet"))
			cancel()
			if err != nil {
				t.Fatalf("ignition %s stage: %v\n%s", stage, err, lastLines(out, 30))
			}
		}
		return root
	}

	for _, v := range []string{"3.1.0", "3.2.0"} {
		t.Run(v, func(t *testing.T) {
			root := fetch(t, vipMCS, v)
			// The appliance's files are the ones `appliance ignition` put
			// into master.ign (cmd/appliance's tests hold it to the node's
			// plan); the MCS's come through the merge.
			want := append(ignitionFiles(t, edited), bootstrap.File{Path: "/etc/mcs-file", Mode: 0o644, Contents: mcs.file})
			if !slices.ContainsFunc(want, func(f bootstrap.File) bool { return f.Path == bootstrap.StaticPodPath }) {
				t.Fatalf("master.ign carries no static pod at %s: %d files", bootstrap.StaticPodPath, len(want)-1)
			}
			for _, f := range want {
				p := filepath.Join(root, f.Path)
				got, err := os.ReadFile(p)
				if err != nil {
					t.Errorf("%s: %v", f.Path, err)
					continue
				}
				fi, _ := os.Stat(p)
				if string(got) != string(f.Contents) || fi.Mode().Perm() != os.FileMode(f.Mode) {
					t.Errorf("%s: mode %#o and contents %.60q, want %#o and %.60q", f.Path, fi.Mode().Perm(), got, f.Mode, f.Contents)
				}
			}
		})
	}
	// The same pointer asked of the MCS directly: the LB passes the request
	// through as it was (TLS end to end), Accept header included.
	viaVIP := mcs.accepts()
	fetch(t, netip.AddrPortFrom(bootIP, 22623).String(), "3.2.0")
	all := mcs.accepts()
	direct := all[len(all)-1]
	if len(viaVIP) == 0 || !strings.HasPrefix(viaVIP[0], "application/vnd.coreos.ignition+json") {
		t.Fatalf("Accept headers through the VIP: %q", viaVIP)
	}
	for _, a := range viaVIP {
		if a != direct {
			t.Errorf("Accept through the VIP %q, directly %q", a, direct)
		}
	}
	t.Logf("Ignition's Accept header, through the VIP as directly: %q", direct)
}

// ignitionFiles decodes the files (path, mode, contents) of the Ignition
// config at path: data URLs, as bootstrap.Merge writes them.
func ignitionFiles(t *testing.T, path string) []bootstrap.File {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ign struct {
		Storage struct {
			Files []struct {
				Path     string `json:"path"`
				Mode     *int   `json:"mode"`
				Contents struct {
					Source string `json:"source"`
				} `json:"contents"`
			} `json:"files"`
		} `json:"storage"`
	}
	if err := json.Unmarshal(raw, &ign); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []bootstrap.File
	for _, f := range ign.Storage.Files {
		b64, ok := strings.CutPrefix(f.Contents.Source, "data:;base64,")
		if !ok || f.Mode == nil {
			t.Fatalf("%s: %s: source %.40q (want a base64 data URL) and mode %v", path, f.Path, f.Contents.Source, f.Mode)
		}
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, f.Path, err)
		}
		out = append(out, bootstrap.File{Path: f.Path, Mode: *f.Mode, Contents: b})
	}
	return out
}

// waitProbe GETs http://addr/path inside node, as the kubelet probes a
// hostNetwork pod, until it answers 200.
func waitProbe(t *testing.T, n *netlab.Node, addr, path string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		c, err := n.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return c, nil }, DisableKeepAlives: true}
			resp, gerr := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("http://" + addr + path)
			if gerr == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
				last = fmt.Sprintf("%d %s", resp.StatusCode, body)
			} else {
				last = gerr.Error()
			}
			tr.CloseIdleConnections()
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("probe http://%s%s never answered 200: %s", addr, path, last)
}

// scratchRoot is a root Ignition's files stage can write into: root in
// passwd and group, SELinux off, traversable by the users it creates.
func scratchRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "appliance-ignition-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	os.Chmod(root, 0o755)
	for name, data := range map[string]string{
		"etc/passwd":         "root:x:0:0:root:/root:/bin/bash\n",
		"etc/group":          "root:x:0:\n",
		"etc/selinux/config": "SELINUX=disabled\nSELINUXTYPE=targeted\n",
	} {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
