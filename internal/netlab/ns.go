package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` looks for named namespaces; using it lets
// `ip netns exec`, tcpdump and daemons under test run inside lab nodes.
const netnsDir = "/run/netns"

var (
	netnsDirMu    sync.Mutex
	netnsDirReady bool
)

// prepareNetnsDir makes /run/netns a shared mount point, as `ip netns add`
// does, so that unmounting a namespace file also unmounts the copies held by
// the private mount namespaces of running `ip netns exec` processes; without
// that a deleted namespace would live on until those processes exit.
func prepareNetnsDir() error {
	netnsDirMu.Lock()
	defer netnsDirMu.Unlock()
	if netnsDirReady {
		return nil
	}
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("netlab: create %s: %w", netnsDir, err)
	}
	d, err := os.Open(netnsDir)
	if err != nil {
		return fmt.Errorf("netlab: open %s: %w", netnsDir, err)
	}
	defer d.Close()
	// Two test binaries starting at once on a fresh machine must not both
	// bind-mount the directory onto itself (the second mount would hide
	// namespaces created under the first). A bind mount of a directory onto
	// itself keeps the inode, so the lock covers both views.
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("netlab: lock %s: %w", netnsDir, err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN) //nolint:errcheck // closing the fd unlocks too

	err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet.
		if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("netlab: bind-mount %s: %w", netnsDir, err)
		}
		err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("netlab: make %s shared: %w", netnsDir, err)
	}
	netnsDirReady = true
	return nil
}

func nsPath(name string) string { return filepath.Join(netnsDir, name) }

// onFreshThread runs fn on a goroutine locked to its OS thread and never
// unlocks it, so the runtime destroys that thread when fn returns. Whatever
// fn does to the thread (setns, unshare) therefore cannot leak into other
// goroutines, and there is no "restore" step that could fail. A panic in fn
// is re-raised in the caller's goroutine.
func onFreshThread(fn func() error) error {
	type result struct {
		err   error
		panic any
		stack []byte
	}
	ch := make(chan result, 1)
	var work func()
	work = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread is never destroyed: the runtime parks it
			// for good instead, and /proc/<pid>/ns/net would then name
			// a lab namespace and keep it alive. Stay locked here (so the
			// main thread runs nothing else) while another goroutine,
			// necessarily on another thread, does the work.
			done := make(chan struct{})
			go func() { work(); close(done) }()
			<-done
			runtime.UnlockOSThread()
			return
		}
		// Deliberately no UnlockOSThread: see above.
		defer func() {
			if p := recover(); p != nil {
				ch <- result{panic: p, stack: debug.Stack()}
			}
		}()
		ch <- result{err: fn()}
	}
	go work()
	r := <-ch
	if r.panic != nil {
		panic(fmt.Sprintf("%v\n\n[goroutine in network namespace]\n%s", r.panic, r.stack))
	}
	return r.err
}

// inNS runs fn on a fresh OS thread that has joined the named namespace.
func inNS(name string, fn func() error) error {
	return onFreshThread(func() error {
		fd, err := unix.Open(nsPath(name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("netlab: open namespace %s: %w", name, err)
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("netlab: enter namespace %s: %w", name, err)
		}
		return fn()
	})
}

// createNS creates the named namespace and runs setup inside it. On error
// nothing is left behind.
func createNS(name string, setup func() error) error {
	if err := prepareNetnsDir(); err != nil {
		return err
	}
	path := nsPath(name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("netlab: create namespace %s: %w", name, err)
	}
	f.Close()
	err = onFreshThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("netlab: create namespace %s: unshare: %w", name, err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("netlab: create namespace %s: bind mount: %w", name, err)
		}
		if setup != nil {
			return setup()
		}
		return nil
	})
	if err != nil {
		_ = deleteNS(name)
		return err
	}
	return nil
}

// deleteNS removes the name of a namespace; the kernel frees the namespace
// (and the veth ends inside it) once no process or fd holds it any more.
// A name that is already gone is not an error.
func deleteNS(name string) error {
	path := nsPath(name)
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netlab: delete namespace %s: unmount: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netlab: delete namespace %s: %w", name, err)
	}
	return nil
}

// nsID identifies a network namespace by its nsfs inode.
type nsID struct{ dev, ino uint64 }

func statNS(path string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{dev: st.Dev, ino: st.Ino}, nil
}

// procEntry is one live process as seen in /proc.
type procEntry struct {
	pid, pgid int
	ns        nsID
}

// scanProcs lists live processes (not threads, not zombies) other than this
// one, with their process group and network namespace.
func scanProcs() []procEntry {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []procEntry
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		state, pgid, ok := procStat(pid)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		id, err := statNS("/proc/" + e.Name() + "/ns/net")
		if err != nil {
			continue
		}
		out = append(out, procEntry{pid: pid, pgid: pgid, ns: id})
	}
	return out
}

// procsIn lists the live processes whose network namespace is in ids or
// whose process group is in pgids.
func procsIn(ids map[nsID]bool, pgids map[int]bool) []int {
	if len(ids) == 0 && len(pgids) == 0 {
		return nil
	}
	var pids []int
	for _, p := range scanProcs() {
		if ids[p.ns] || pgids[p.pgid] {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// procStat returns the state letter and process group of pid.
func procStat(pid int) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// Fields after the parenthesised command name (which may itself hold
	// spaces and parentheses): state ppid pgrp ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pgid, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pgid, true
}

// pidAlive reports whether a process with this pid exists and is not a zombie.
func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	if err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// writeSysctl writes a sysctl of the calling thread's network namespace.
// key is either dotted ("net.ipv6.conf.all.accept_dad") or a path relative
// to /proc/sys (needed when an interface name contains a dot).
func writeSysctl(key, value string) error {
	if err := os.WriteFile(sysctlPath(key), []byte(value), 0); err != nil {
		return fmt.Errorf("netlab: sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

func readSysctl(key string) (string, error) {
	b, err := os.ReadFile(sysctlPath(key))
	if err != nil {
		return "", fmt.Errorf("netlab: sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func sysctlPath(key string) string {
	if !strings.Contains(key, "/") {
		key = strings.ReplaceAll(key, ".", "/")
	}
	return filepath.Join("/proc/sys", key)
}
