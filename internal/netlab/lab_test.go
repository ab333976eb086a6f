package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

var v6Prefix = netip.MustParsePrefix("fd00:126::/64")

func itoa(i int) string { return strconv.Itoa(i) }
func selfPID() int      { return os.Getpid() }

// deadPID returns a pid that no process has right now.
func deadPID(t *testing.T) int {
	t.Helper()
	max := 32768
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			max = v
		}
	}
	for pid := max - 1; pid > 1; pid-- {
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			return pid
		}
	}
	t.Fatal("no free pid")
	return 0
}

func ping(ctx context.Context, from *Node, to netip.Addr, wait string) error {
	_, err := from.Run(ctx, "ping", "-n", "-c", "1", "-W", wait, to.String())
	return err
}

func mustPing(t *testing.T, from *Node, to netip.Addr) {
	t.Helper()
	// Allow a couple of tries: the first packet also resolves the neighbour.
	var err error
	for range 3 {
		if err = ping(t.Context(), from, to, "2"); err == nil {
			return
		}
	}
	t.Fatalf("%s cannot ping %s: %v", from, to, err)
}

func mustNotPing(t *testing.T, from *Node, to netip.Addr) {
	t.Helper()
	if err := ping(t.Context(), from, to, "1"); err == nil {
		t.Fatalf("%s can still ping %s", from, to)
	}
}

// labNamespaces lists the /run/netns entries that start with prefix.
func labNamespaces(t *testing.T, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func groupMembers(pgid int) []int { return procsIn(nil, map[int]bool{pgid: true}) }

func TestPingV4V6(t *testing.T) {
	l := NewT(t, Options{Nodes: 3, Name: "ping", IPv6: v6Prefix})
	if len(l.Nodes) != 3 {
		t.Fatalf("got %d nodes", len(l.Nodes))
	}
	for i, n := range l.Nodes {
		if n.Index != i || n.Name != "n"+itoa(i) || n.NS != l.Prefix()+"-n"+itoa(i) || n.Iface != "eth0" {
			t.Errorf("node %d: %+v", i, n)
		}
	}
	if got := l.Nodes[2].IPv6.String(); got != "fd00:126::12/64" {
		t.Errorf("n2 IPv6 = %s", got)
	}
	for _, from := range l.Nodes {
		for _, to := range l.Nodes {
			if from == to {
				continue
			}
			for _, a := range to.Addrs() {
				mustPing(t, from, a)
			}
		}
	}
	// The node's own view: MAC and both addresses on eth0.
	h, err := l.Nodes[1].Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if link.Attrs().HardwareAddr.String() != "52:54:00:7e:00:11" {
		t.Errorf("n1 eth0 MAC = %s", link.Attrs().HardwareAddr)
	}
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range addrs {
		got = append(got, a.IPNet.String())
	}
	for _, want := range []string{"192.168.126.11/24", "fd00:126::11/64"} {
		if !slices.Contains(got, want) {
			t.Errorf("n1 eth0 addresses %v lack %s", got, want)
		}
	}
}

// rootSnapshot describes the root namespace's network state as seen by
// this (root-namespace) thread.
func rootSnapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	lft := regexp.MustCompile(`(valid|preferred)_lft \S+`)
	for _, args := range [][]string{
		{"-o", "link"}, {"-o", "addr"}, {"-o", "route", "show", "table", "all"},
		{"-o", "-6", "route", "show", "table", "all"}, {"-o", "rule"}, {"-o", "-6", "rule"},
	} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
		b.WriteString(lft.ReplaceAllString(string(out), "$1_lft X"))
	}
	for _, k := range []string{
		"net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad",
		"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6",
		"net/ipv4/ip_forward",
	} {
		v, err := readSysctl(k)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	return b.String()
}

func TestRootNamespaceUntouched(t *testing.T) {
	RequireRoot(t)
	// Pin this goroutine so the subscription socket and the snapshots are
	// provably made from a root-namespace thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, _ := statNS("/proc/thread-self/ns/net")
	proc, _ := statNS("/proc/self/ns/net")
	if self != proc {
		t.Fatal("test thread is not in the process's namespace")
	}

	before := rootSnapshot(t)
	known := map[int]bool{}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		known[l.Attrs().Index] = true
	}
	// Catch even a link that exists only for a moment.
	updates := make(chan netlink.LinkUpdate, 1024)
	done := make(chan struct{})
	if err := netlink.LinkSubscribe(updates, done); err != nil {
		t.Fatal(err)
	}
	addrUpdates := make(chan netlink.AddrUpdate, 1024)
	addrDone := make(chan struct{})
	if err := netlink.AddrSubscribe(addrUpdates, addrDone); err != nil {
		t.Fatal(err)
	}

	l, err := New(t.Context(), Options{Nodes: 2, IPv6: v6Prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AddNode(t.Context()); err != nil {
		t.Error(err)
	}
	if err := l.Nodes[0].LinkDown(); err != nil {
		t.Error(err)
	}
	if err := l.Nodes[0].LinkUp(); err != nil {
		t.Error(err)
	}
	if err := l.Nodes[1].Partition(); err != nil {
		t.Error(err)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
	time.Sleep(100 * time.Millisecond) // let the kernel deliver late events
	close(done)
	close(addrDone)

	for {
		select {
		case u, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			if !known[int(u.Index)] {
				t.Errorf("link appeared in root namespace: index %d %s (msg type %d)", u.Index, u.Attrs().Name, u.Header.Type)
			}
			continue
		case u, ok := <-addrUpdates:
			if !ok {
				addrUpdates = nil
				continue
			}
			t.Errorf("address change in root namespace: %+v", u)
			continue
		default:
		}
		break
	}
	if after := rootSnapshot(t); after != before {
		t.Errorf("root namespace changed.\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if left := labNamespaces(t, l.Prefix()); len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
}

func TestCloseKillsEverything(t *testing.T) {
	RequireRoot(t)
	l, err := New(t.Context(), Options{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := l.Nodes[1]
	group, err := n.Start(t.Context(), "sh", "-c", "sleep 1000 & sleep 1000")
	if err != nil {
		t.Fatal(err)
	}
	// Ignores SIGTERM (and its child inherits that): needs the SIGKILL.
	stubborn, err := l.Nodes[0].Start(t.Context(), "sh", "-c", "trap '' TERM; sleep 1000; true")
	if err != nil {
		t.Fatal(err)
	}
	// Leaves the lab's process group, as a daemon would.
	escapee, err := n.Start(t.Context(), "sh", "-c", "setsid sleep 1000 & wait")
	if err != nil {
		t.Fatal(err)
	}
	untracked := n.Command(t.Context(), "sleep", "1000")
	if err := untracked.Start(); err != nil {
		t.Fatal(err)
	}
	untrackedDone := make(chan struct{})
	go func() { _ = untracked.Wait(); close(untrackedDone) }()

	ids := map[nsID]bool{}
	for _, name := range labNamespaces(t, l.Prefix()) {
		id, err := statNS(nsPath(name))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if len(ids) != 3 {
		t.Fatalf("want 3 namespaces, got %d", len(ids))
	}
	// sh + 2 sleeps, sh + sleep, sh + setsid'd sleep, untracked sleep.
	if !waitFor(func() bool {
		return len(groupMembers(group.Pid())) >= 3 && len(procsIn(ids, nil)) >= 8
	}, 5*time.Second) {
		t.Fatalf("processes did not start: group %v, in lab %v", groupMembers(group.Pid()), procsIn(ids, nil))
	}
	dir := l.Dir()

	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < stopGrace/2 {
		t.Errorf("Close took %v; the SIGTERM-ignoring process should have cost the grace period", took)
	}
	if took > 20*time.Second {
		t.Errorf("Close took %v", took)
	}
	for _, p := range []*Process{group, stubborn, escapee} {
		select {
		case <-p.Done():
		default:
			t.Errorf("process %d not reaped", p.Pid())
		}
	}
	if left := procsIn(ids, map[int]bool{group.Pid(): true, stubborn.Pid(): true, escapee.Pid(): true}); len(left) > 0 {
		t.Errorf("processes survived Close: %v", left)
	}
	select {
	case <-untrackedDone:
	case <-time.After(5 * time.Second):
		t.Error("untracked command survived Close")
	}
	if left := labNamespaces(t, l.Prefix()); len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log dir %s not removed: %v", dir, err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := n.Start(t.Context(), "true"); err == nil {
		t.Error("Start after Close succeeded")
	}
	if _, err := l.AddNode(t.Context()); err == nil {
		t.Error("AddNode after Close succeeded")
	}
	if err := n.Do(func() error { return nil }); err == nil {
		t.Error("Do after Close succeeded")
	}
}

func TestProcess(t *testing.T) {
	l := NewT(t, Options{Nodes: 1})
	n := l.Nodes[0]
	p, err := n.Start(t.Context(), "sh", "-c", "echo out; echo err >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("Wait = %v, want exit status 3", err)
	}
	if err := p.Wait(); !errors.As(err, &ee) {
		t.Errorf("second Wait = %v", err)
	}
	if out := p.Output(); !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") {
		t.Errorf("Output = %q", out)
	}
	if !strings.HasPrefix(p.LogPath(), l.Dir()) {
		t.Errorf("log %s outside %s", p.LogPath(), l.Dir())
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit = %v", err)
	}

	// The command really runs inside the node.
	out, err := n.Run(t.Context(), "ip", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, "192.168.126.10/24") {
		t.Errorf("ip addr in node: %v\n%s", err, out)
	}
	if _, err := n.Run(t.Context(), "sh", "-c", "echo boom; exit 1"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Run error %v lacks output", err)
	}

	s, err := n.Start(t.Context(), "sleep", "1000")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); !errors.As(err, &ee) {
		t.Errorf("Wait after SIGTERM = %v", err)
	}
	k, err := n.Start(t.Context(), "sh", "-c", "sleep 1000 & sleep 1000")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(func() bool { return len(groupMembers(k.Pid())) >= 2 }, 5*time.Second)
	if err := k.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = k.Wait()
	if !waitFor(func() bool { return len(groupMembers(k.Pid())) == 0 }, 5*time.Second) {
		t.Errorf("Kill left %v", groupMembers(k.Pid()))
	}
	st, err := n.Start(t.Context(), "sleep", "1000")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Stop(time.Second); !errors.As(err, &ee) {
		t.Errorf("Stop = %v", err)
	}

	// Cancelling the context kills the group.
	ctx, cancel := context.WithCancel(t.Context())
	c, err := n.Start(ctx, "sh", "-c", "sleep 1000 & sleep 1000")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(func() bool { return len(groupMembers(c.Pid())) >= 2 }, 5*time.Second)
	cancel()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not stop the process")
	}
	if !waitFor(func() bool { return len(groupMembers(c.Pid())) == 0 }, 5*time.Second) {
		t.Errorf("cancel left %v", groupMembers(c.Pid()))
	}
}

// TestHelperProcess is not a real test: the tests below run the test
// binary again with NETLAB_HELPER set to act out a failing or crashing run.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("NETLAB_HELPER")
	if mode == "" {
		t.Skip("helper for subprocess tests")
	}
	l := NewT(t, Options{Nodes: 1, Name: "helper"})
	p, err := l.Nodes[0].Start(context.Background(), "sh", "-c", "sleep 1000 & sleep 1000")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(func() bool { return len(groupMembers(p.Pid())) >= 2 }, 5*time.Second)
	fmt.Printf("PREFIX=%s\nPGID=%d\nDIR=%s\n", l.Prefix(), p.Pid(), l.Dir())
	switch mode {
	case "panic":
		t.Run("sub", func(t *testing.T) { panic("boom in subtest") })
	case "hang":
		time.Sleep(time.Minute)
	}
}

// helper starts the test binary in helper mode and returns what it printed
// about its lab once it has printed it.
// Its remaining output goes to out until EOF, then outDone is closed.
func helper(t *testing.T, mode string) (cmd *exec.Cmd, prefix string, pgid int, dir string, out *strings.Builder, outDone <-chan struct{}) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "NETLAB_HELPER="+mode)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out = &strings.Builder{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if v, ok := strings.CutPrefix(line, "PREFIX="); ok {
			prefix = v
		}
		if v, ok := strings.CutPrefix(line, "PGID="); ok {
			pgid, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(line, "DIR="); ok {
			dir = v
			break
		}
	}
	if prefix == "" || pgid == 0 || dir == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper printed no lab:\n%s", out)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
		}
	}()
	return cmd, prefix, pgid, dir, out, done
}

func TestCleanupAfterPanic(t *testing.T) {
	RequireRoot(t)
	cmd, prefix, pgid, dir, out, outDone := helper(t, "panic")
	<-outDone // before Wait, which closes the pipe
	err := cmd.Wait()
	if err == nil || !strings.Contains(out.String(), "panic: boom in subtest") {
		t.Fatalf("helper did not panic (%v):\n%s", err, out)
	}
	if len(labNamespaces(t, prefix)) > 0 {
		t.Errorf("namespaces of %s left after panic", prefix)
	}
	if left := groupMembers(pgid); len(left) > 0 {
		t.Errorf("processes of group %d left after panic: %v", pgid, left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log dir left after panic: %v", err)
	}
}

func TestSweepAfterKill9(t *testing.T) {
	RequireRoot(t)
	cmd, prefix, pgid, dir, _, outDone := helper(t, "hang")
	if got := labNamespaces(t, prefix); len(got) != 2 {
		t.Fatalf("helper lab namespaces: %v", got)
	}
	// A live creator's lab is left alone.
	if _, err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if got := labNamespaces(t, prefix); len(got) != 2 {
		t.Fatalf("Sweep touched a live lab: %v", got)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-outDone
	_ = cmd.Wait()
	// The direct child died with its parent (Pdeathsig), its background
	// sleep did not: only Sweep can get rid of it.
	if _, err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if got := labNamespaces(t, prefix); len(got) > 0 {
		t.Errorf("Sweep left %v", got)
	}
	if left := groupMembers(pgid); len(left) > 0 {
		t.Errorf("Sweep left processes %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Sweep left log dir %s: %v", dir, err)
	}
}

func TestSweepDeadPID(t *testing.T) {
	RequireRoot(t)
	pid := deadPID(t)
	// Random, as another run of this test may pick the same dead pid.
	tag := fmt.Sprintf("%04x", time.Now().UnixNano()&0xffff)
	name := fmt.Sprintf("apl%d-%s-n0", pid, tag)
	if err := createNS(name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteNS(name) })
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("apl%d-%s-logs-1", pid, tag))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	orphan := nsCommand(t.Context(), name, "sleep", "1000")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	orphanDone := make(chan struct{})
	go func() { _ = orphan.Wait(); close(orphanDone) }()
	id, _ := statNS(nsPath(name))
	waitFor(func() bool { return len(procsIn(map[nsID]bool{id: true}, nil)) == 1 }, 5*time.Second)

	removed, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %v", removed) // another test binary may sweep it first
	if _, err := os.Stat(nsPath(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace %s not swept: %v", name, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s not swept: %v", dir, err)
	}
	select {
	case <-orphanDone:
	case <-time.After(5 * time.Second):
		t.Error("process inside the stale namespace survived Sweep")
	}
}

func TestConcurrentLabs(t *testing.T) {
	RequireRoot(t)
	const n = 3
	labs := make([]*Lab, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			labs[i], errs[i] = New(t.Context(), Options{Nodes: 2, Name: "conc"})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer labs[i].Close()
	}
	seen := map[string]bool{}
	for _, l := range labs {
		if seen[l.Prefix()] {
			t.Fatalf("duplicate prefix %s", l.Prefix())
		}
		seen[l.Prefix()] = true
		mustPing(t, l.Nodes[0], l.Nodes[1].IPv4.Addr())
	}
	// Same addresses in every lab, yet each lab is its own segment:
	// partitioning one lab's node leaves the others alone.
	if err := labs[0].Nodes[1].LinkDown(); err != nil {
		t.Fatal(err)
	}
	mustNotPing(t, labs[0].Nodes[0], labs[0].Nodes[1].IPv4.Addr())
	mustPing(t, labs[1].Nodes[0], labs[1].Nodes[1].IPv4.Addr())
	for i := range n {
		wg.Go(func() { errs[i] = labs[i].Close() })
	}
	wg.Wait()
	for i, l := range labs {
		if errs[i] != nil {
			t.Error(errs[i])
		}
		if left := labNamespaces(t, l.Prefix()); len(left) > 0 {
			t.Errorf("left %v", left)
		}
	}
}

// linkState reports eth0's admin state, carrier and operstate in n.
func linkState(t *testing.T, n *Node) (up, lowerUp bool, oper netlink.LinkOperState) {
	t.Helper()
	err := n.Do(func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		up = link.Attrs().RawFlags&unix.IFF_UP != 0
		lowerUp = link.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
		oper = link.Attrs().OperState
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return up, lowerUp, oper
}

func TestLinkDownUp(t *testing.T) {
	l := NewT(t, Options{Nodes: 2, IPv6: v6Prefix})
	n0, n1 := l.Nodes[0], l.Nodes[1]
	mustPing(t, n0, n1.IPv4.Addr())

	if err := n1.LinkDown(); err != nil {
		t.Fatal(err)
	}
	up, lower, oper := linkState(t, n1)
	t.Logf("after LinkDown, node side eth0: up=%v carrier=%v operstate=%s", up, lower, oper)
	if !up || lower {
		t.Errorf("node eth0 after LinkDown: up=%v carrier=%v, want up without carrier", up, lower)
	}
	out, err := n1.Run(t.Context(), "ip", "-o", "addr", "show", "dev", "eth0")
	if err != nil || !strings.Contains(out, n1.IPv4.String()) || !strings.Contains(out, n1.IPv6.String()) {
		t.Errorf("addresses after LinkDown: %v\n%s", err, out)
	}
	mustNotPing(t, n0, n1.IPv4.Addr())
	mustNotPing(t, n1, n0.IPv6.Addr())

	if err := n1.LinkUp(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { _, lower, _ := linkState(t, n1); return lower }, 5*time.Second) {
		t.Fatal("carrier did not return")
	}
	mustPing(t, n0, n1.IPv4.Addr())
	mustPing(t, n1, n0.IPv6.Addr())
}

func TestPartitionHeal(t *testing.T) {
	l := NewT(t, Options{Nodes: 3})
	n0, n1, n2 := l.Nodes[0], l.Nodes[1], l.Nodes[2]
	mustPing(t, n0, n1.IPv4.Addr())
	if err := n1.Partition(); err != nil {
		t.Fatal(err)
	}
	if up, lower, _ := linkState(t, n1); !up || !lower {
		t.Errorf("node eth0 after Partition: up=%v carrier=%v, want both", up, lower)
	}
	mustNotPing(t, n0, n1.IPv4.Addr())
	mustNotPing(t, n1, n2.IPv4.Addr())
	mustPing(t, n0, n2.IPv4.Addr())
	if err := n1.Heal(); err != nil {
		t.Fatal(err)
	}
	mustPing(t, n0, n1.IPv4.Addr())
	mustPing(t, n1, n2.IPv4.Addr())
}

func TestDo(t *testing.T) {
	l := NewT(t, Options{Nodes: 2})
	n := l.Nodes[1]
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	proc, err := statNS("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := statNS("/proc/thread-self/ns/net")
	want, err := statNS(nsPath(n.NS))
	if err != nil {
		t.Fatal(err)
	}
	var inside nsID
	var names []string
	var mac string
	err = n.Do(func() error {
		inside, err = statNS("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			names = append(names, l.Attrs().Name)
			if l.Attrs().Name == "eth0" {
				mac = l.Attrs().HardwareAddr.String()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if inside != want {
		t.Error("Do did not run inside the node's namespace")
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"eth0", "lo"}) || mac != n.MAC.String() {
		t.Errorf("links inside node: %v, eth0 MAC %s", names, mac)
	}
	after, _ := statNS("/proc/thread-self/ns/net")
	if after != before || after != proc {
		t.Error("calling thread's namespace changed")
	}
	// Errors and panics come back to the caller.
	sentinel := errors.New("sentinel")
	if err := n.Do(func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Errorf("Do error = %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "kaboom") {
				t.Errorf("recovered %v", r)
			}
		}()
		_ = n.Do(func() error { panic("kaboom") })
	}()
	// Many calls leave every thread of the process in its own namespace.
	for range 50 {
		if err := n.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// A finished Do's thread may take a moment to exit; one that stays
	// (as the main thread would, see onFreshThread) is a leak.
	var terr error
	if !waitFor(func() bool { terr = threadsInRootNS(proc); return terr == nil }, 2*time.Second) {
		t.Error(terr)
	}

	v, err := n.ReadSysctl("net.ipv6.conf.eth0.accept_dad")
	if err != nil || v != "0" {
		t.Errorf("eth0 accept_dad = %q, %v", v, err)
	}
	if err := n.Sysctl("net.ipv4.ip_nonlocal_bind", "1"); err != nil {
		t.Fatal(err)
	}
	if v, _ := n.ReadSysctl("net.ipv4.ip_nonlocal_bind"); v != "1" {
		t.Errorf("ip_nonlocal_bind in node = %q", v)
	}
	if v, _ := readSysctl("net.ipv4.ip_nonlocal_bind"); v == "1" {
		t.Log("note: root namespace already had ip_nonlocal_bind=1")
	}
}

// threadsInRootNS checks that every thread of this process is in ns.
func threadsInRootNS(ns nsID) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		id, err := statNS("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue // thread exited meanwhile
		}
		if id != ns {
			return fmt.Errorf("thread %s is in another network namespace", task.Name())
		}
	}
	return nil
}

// TestDial: a connection DialTimeout opens is the node's: it reaches a listener
// on another node, and its local address is the node's.
func TestDial(t *testing.T) {
	l := NewT(t, Options{Nodes: 2})
	a, b := l.Nodes[0], l.Nodes[1]
	var ln net.Listener
	if err := b.Do(func() (err error) { ln, err = net.Listen("tcp", ":0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := a.DialTimeout("tcp", netip.AddrPortFrom(b.IPv4.Addr(), uint16(port)).String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap(); got != a.IPv4.Addr() {
		t.Errorf("local address %s, want %s", got, a.IPv4.Addr())
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
		t.Errorf("read %q, %v", b, err)
	}
}

func TestAddNode(t *testing.T) {
	l := NewT(t, Options{Nodes: 1, IPv6: v6Prefix})
	c, err := l.AddNode(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if c.Index != 1 || c.IPv4.String() != "192.168.126.11/24" || c.IPv6.String() != "fd00:126::11/64" || len(l.Nodes) != 2 {
		t.Errorf("added node %+v", c)
	}
	mustPing(t, c, l.Nodes[0].IPv4.Addr())
	mustPing(t, l.Nodes[0], c.IPv6.Addr())
}

// TestMulticast checks that VRRP (IPv4 and IPv6) and mDNS multicast from
// one node reach every other node through the bridge.
func TestMulticast(t *testing.T) {
	l := NewT(t, Options{Nodes: 3, IPv6: v6Prefix})
	sender, receivers := l.Nodes[0], l.Nodes[1:]
	vrrp4 := &net.IPAddr{IP: net.IPv4(224, 0, 0, 18)}
	vrrp6 := &net.IPAddr{IP: net.ParseIP("ff02::12")}
	mdns := &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251), Port: 5353}

	type rx struct {
		node string
		kind string
		c    net.PacketConn
	}
	var conns []rx
	defer func() {
		for _, r := range conns {
			r.c.Close()
		}
	}()
	for _, n := range receivers {
		err := n.Do(func() error {
			ifi, err := net.InterfaceByName("eth0")
			if err != nil {
				return err
			}
			c4, err := net.ListenPacket("ip4:112", "0.0.0.0")
			if err != nil {
				return err
			}
			conns = append(conns, rx{n.Name, "vrrp4", c4})
			if err := ipv4.NewPacketConn(c4).JoinGroup(ifi, vrrp4); err != nil {
				return err
			}
			c6, err := net.ListenPacket("ip6:112", "::")
			if err != nil {
				return err
			}
			conns = append(conns, rx{n.Name, "vrrp6", c6})
			if err := ipv6.NewPacketConn(c6).JoinGroup(ifi, vrrp6); err != nil {
				return err
			}
			cm, err := net.ListenMulticastUDP("udp4", ifi, mdns)
			if err != nil {
				return err
			}
			conns = append(conns, rx{n.Name, "mdns", cm})
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	err := sender.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c4, err := net.ListenPacket("ip4:112", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c4.Close()
		p4 := ipv4.NewPacketConn(c4)
		if err := p4.SetMulticastInterface(ifi); err != nil {
			return err
		}
		if err := p4.SetMulticastTTL(255); err != nil {
			return err
		}
		if _, err := c4.WriteTo([]byte("vrrp4"), vrrp4); err != nil {
			return fmt.Errorf("send vrrp4: %w", err)
		}
		c6, err := net.ListenPacket("ip6:112", "::")
		if err != nil {
			return err
		}
		defer c6.Close()
		p6 := ipv6.NewPacketConn(c6)
		if err := p6.SetMulticastInterface(ifi); err != nil {
			return err
		}
		if err := p6.SetMulticastHopLimit(255); err != nil {
			return err
		}
		if _, err := c6.WriteTo([]byte("vrrp6"), vrrp6); err != nil {
			return fmt.Errorf("send vrrp6: %w", err)
		}
		cu, err := net.ListenPacket("udp4", "0.0.0.0:0")
		if err != nil {
			return err
		}
		defer cu.Close()
		if err := ipv4.NewPacketConn(cu).SetMulticastInterface(ifi); err != nil {
			return err
		}
		if _, err := cu.WriteTo([]byte("mdns"), mdns); err != nil {
			return fmt.Errorf("send mdns: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range conns {
		_ = r.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 1500)
		n, from, err := r.c.ReadFrom(buf)
		if err != nil {
			t.Errorf("%s did not receive %s: %v", r.node, r.kind, err)
			continue
		}
		if got := string(buf[:n]); got != r.kind {
			t.Errorf("%s %s: got %q from %v", r.node, r.kind, got, from)
		}
		if r.kind != "vrrp6" && !strings.HasPrefix(from.String(), sender.IPv4.Addr().String()) {
			t.Errorf("%s %s: from %v, want %s", r.node, r.kind, from, sender.IPv4.Addr())
		}
	}
}
