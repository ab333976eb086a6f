package kubenodes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The real kube-apiserver (and its etcd) this package's tests share,
// started by ../shared/tools/kube-apiserver/start.sh. Tests run one after
// another; each labels its Nodes with its own name and watches only those.
var kube struct {
	kubeconfig string
	state      string // start.sh's folder
	cfg        *rest.Config
	http       *http.Client
	client     kubernetes.Interface
	tools      string
	assets     string
	skip       string // why no server runs
}

// clientLogs receives what klog logs once New has routed it (TestMain's
// first New), for TestClientLogsGoThroughSlog.
var clientLogs syncBuffer

func TestMain(m *testing.M) {
	if err := routeFirst(); err != nil {
		fmt.Fprintln(os.Stderr, "internal/kubenodes tests:", err)
		os.Exit(1)
	}
	stop, err := startAPIServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "internal/kubenodes tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	if kube.http != nil {
		utilnet.CloseIdleConnectionsFor(kube.http.Transport)
	}
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "internal/kubenodes tests: goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// routeFirst makes the test binary's first New, so that klog is routed to
// clientLogs whatever order the tests run in.
func routeFirst() error {
	dir, err := os.MkdirTemp("", "kubenodes-test-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kc := filepath.Join(dir, "kubeconfig")
	body := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://192.0.2.1:6443\n" +
		"contexts:\n- name: x\n  context:\n    cluster: c\ncurrent-context: x\n"
	if err := os.WriteFile(kc, []byte(body), 0o600); err != nil {
		return err
	}
	_, err = New(newState(), Options{Kubeconfig: kc}, slog.New(slog.NewJSONHandler(&clientLogs, nil)))
	return err
}

// startAPIServer starts the shared server, or sets kube.skip when its
// binaries are absent. The returned stop never fails the run.
func startAPIServer() (stop func(), err error) {
	stop = func() {}
	root, err := moduleRoot()
	if err != nil {
		return stop, err
	}
	// The same conventions as platform/kubevirt's tests, so one setup
	// (make test) serves both.
	kube.tools = filepath.Join(root, "..", "shared", "tools")
	if v := os.Getenv("APPLIANCE_TOOLS"); v != "" {
		kube.tools = v
	}
	kube.assets = serverAssets()
	if kube.assets == "" {
		kube.skip = "no kube-apiserver: run KUBEBUILDER_ASSETS=$(../shared/tools/kube-apiserver/build.sh) go test ./internal/kubenodes (make test does)"
		return stop, nil
	}
	if _, err := os.Stat(filepath.Join(kube.tools, "kube-apiserver", "start.sh")); err != nil {
		kube.skip = fmt.Sprintf("no %s/kube-apiserver/start.sh (set APPLIANCE_TOOLS to the shared tools folder)", kube.tools)
		return stop, nil
	}
	state, err := os.MkdirTemp("", "kubenodes-test-api-")
	if err != nil {
		return stop, err
	}
	if state, err = filepath.EvalSymlinks(state); err != nil { // stop.sh compares this spelling
		return stop, err
	}
	t0 := time.Now()
	kc, err := script(map[string]string{"KUBE_OWNER_PID": fmt.Sprint(os.Getpid())}, "kube-apiserver/start.sh", state)
	// stop.sh ends exactly the processes start.sh recorded (and the
	// apiserver restartAPIServer adds), even after a failed start.
	stop = func() { _, _ = script(nil, "kube-apiserver/stop.sh", state) }
	if err != nil {
		stop()
		return func() {}, err
	}
	kube.kubeconfig, kube.state = kc, state
	if kube.cfg, err = clientcmd.BuildConfigFromFlags("", kc); err != nil {
		stop()
		return func() {}, err
	}
	kube.cfg.QPS, kube.cfg.Burst = -1, 0
	hc, err := rest.HTTPClientFor(kube.cfg)
	if err != nil {
		stop()
		return func() {}, err
	}
	kube.http = hc
	if kube.client, err = kubernetes.NewForConfigAndClient(kube.cfg, hc); err != nil {
		stop()
		return func() {}, err
	}
	fmt.Fprintf(os.Stderr, "internal/kubenodes tests: kube-apiserver ready in %s\n", time.Since(t0).Round(time.Millisecond))
	return stop, nil
}

// requireAPI skips the test when no server runs, and fails it instead
// under CI, so a missing setup never passes silently.
func requireAPI(t *testing.T) {
	t.Helper()
	if kube.skip == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(kube.skip)
	}
	t.Skip(kube.skip)
}

// serverAssets is $KUBEBUILDER_ASSETS, else build.sh's default folder when
// an earlier build.sh filled it; "" when neither holds the binaries.
func serverAssets() string {
	dirs := []string{os.Getenv("KUBEBUILDER_ASSETS")}
	if cache, err := os.UserCacheDir(); err == nil && dirs[0] == "" {
		dirs = append(dirs, filepath.Join(cache, "appliance-kube", "v1.37.1", "bin"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		ok := true
		for _, b := range []string{"etcd", "kube-apiserver"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}

// moduleRoot is the folder holding go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// script runs one of the shared tools and returns its stdout's last line;
// a failure carries its stderr.
func script(env map[string]string, name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(kube.tools, name), args...)
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+kube.assets)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", name, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

// stopAPIServer kills the shared kube-apiserver, as a crash would (etcd
// keeps running; SIGTERM's graceful shutdown takes 15 s), and returns what
// restartAPIServer needs to start it again: its command line, so it comes
// back on the same port with the same certificates and data.
func stopAPIServer(t *testing.T) []string {
	t.Helper()
	pid, args := apiServerProcess(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing kube-apiserver %d: %v", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !exited(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver %d still runs 10 s after SIGKILL", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Its listener is closed by now; make sure before a restart binds it.
	addr := flagValue(args, "--bind-address") + ":" + flagValue(args, "--secure-port")
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver's %s still taken 10 s after SIGKILL: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return args
}

// exited reports whether pid has finished exiting: gone, or a zombie. (Its
// command line empties earlier, while its sockets are still open.)
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')') // the command name may hold anything
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// restartAPIServer starts kube-apiserver again with args, records it for
// stop.sh, and waits until it is ready.
func restartAPIServer(t *testing.T, args []string) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(kube.state, "kube-apiserver.log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	logf.Close()
	// Reaped by whoever outlives it; stop.sh ends it by its pid.
	go func() { _ = cmd.Wait() }()
	pids, err := os.OpenFile(filepath.Join(kube.state, "pids"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(pids, "%d kube-apiserver\n", cmd.Process.Pid)
	pids.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for {
		body, err := kube.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(kube.state, "kube-apiserver.log"))
			if len(log) > 3000 {
				log = log[len(log)-3000:]
			}
			t.Fatalf("kube-apiserver not ready 60 s after a restart: %v; its log ends:\n%s", err, log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// apiServerProcess is the running kube-apiserver's pid and command line,
// the last one recorded in start.sh's pids file that still runs.
func apiServerProcess(t *testing.T) (int, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(kube.state, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) != 2 || f[1] != "kube-apiserver" {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || !alive(pid) {
			continue
		}
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		return pid, strings.Split(strings.TrimRight(string(cl), "\x00"), "\x00")
	}
	t.Fatalf("no running kube-apiserver in %s/pids", kube.state)
	return 0, nil
}

// alive reports whether pid runs and is still the server in kube.state
// (an exited process's command line is empty).
func alive(pid int) bool {
	cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cl), kube.state+"/")
}

// proxy forwards TCP connections to the API server, and can cut them all
// and refuse new ones (the API unreachable) while the server runs on.
type proxy struct {
	addr   string // 127.0.0.1:port, the same across cuts
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

func (p *proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
	wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// cut closes the listener and every forwarded connection: new connections
// are refused, as from a stopped server.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// resume listens on the same address again.
func (p *proxy) resume(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("proxy: listening on %s again: %v", p.addr, err)
	}
	p.serve(ln)
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
