//go:build kubelet

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// What the kernel says of a container's process: its privileges from
// /proc/PID/status and /proc/PID/mountinfo, its resources from /proc and
// its cgroups. The tier reads these rather than trusting the manifest.

// capBits are the capabilities by the names a pod spec uses.
var capBits = map[string]uint{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"FOWNER": unix.CAP_FOWNER, "FSETID": unix.CAP_FSETID, "KILL": unix.CAP_KILL, "SETGID": unix.CAP_SETGID,
	"SETUID": unix.CAP_SETUID, "SETPCAP": unix.CAP_SETPCAP, "LINUX_IMMUTABLE": unix.CAP_LINUX_IMMUTABLE,
	"NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "NET_BROADCAST": unix.CAP_NET_BROADCAST,
	"NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW, "IPC_LOCK": unix.CAP_IPC_LOCK,
	"IPC_OWNER": unix.CAP_IPC_OWNER, "SYS_MODULE": unix.CAP_SYS_MODULE, "SYS_RAWIO": unix.CAP_SYS_RAWIO,
	"SYS_CHROOT": unix.CAP_SYS_CHROOT, "SYS_PTRACE": unix.CAP_SYS_PTRACE, "SYS_PACCT": unix.CAP_SYS_PACCT,
	"SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYS_BOOT": unix.CAP_SYS_BOOT, "SYS_NICE": unix.CAP_SYS_NICE,
	"SYS_RESOURCE": unix.CAP_SYS_RESOURCE, "SYS_TIME": unix.CAP_SYS_TIME, "SYS_TTY_CONFIG": unix.CAP_SYS_TTY_CONFIG,
	"MKNOD": unix.CAP_MKNOD, "LEASE": unix.CAP_LEASE, "AUDIT_WRITE": unix.CAP_AUDIT_WRITE,
	"AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL, "SETFCAP": unix.CAP_SETFCAP, "MAC_OVERRIDE": unix.CAP_MAC_OVERRIDE,
	"MAC_ADMIN": unix.CAP_MAC_ADMIN, "SYSLOG": unix.CAP_SYSLOG, "WAKE_ALARM": unix.CAP_WAKE_ALARM,
	"BLOCK_SUSPEND": unix.CAP_BLOCK_SUSPEND, "AUDIT_READ": unix.CAP_AUDIT_READ, "PERFMON": unix.CAP_PERFMON,
	"BPF": unix.CAP_BPF, "CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE,
}

// capNames spells a capability mask as a pod spec would.
func capNames(mask uint64) string {
	var names []string
	for name, bit := range capBits {
		if mask&(1<<bit) != 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// procStatus is /proc/PID/status as key → value.
func procStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// procPrivileges is what the kernel enforces on a process.
type procPrivileges struct {
	Eff, Prm, Inh, Bnd, Amb uint64
	NoNewPrivs              string // "1": no exec may gain privileges
	Seccomp                 string // "2": a filter
	Uid                     string
	// Mounts is each mount point's options as the process sees them
	// ("/" is its root filesystem).
	Mounts map[string]string
}

func readPrivileges(pid int) (procPrivileges, error) {
	var p procPrivileges
	st, err := procStatus(pid)
	if err != nil {
		return p, err
	}
	for key, dst := range map[string]*uint64{"CapEff": &p.Eff, "CapPrm": &p.Prm, "CapInh": &p.Inh, "CapBnd": &p.Bnd, "CapAmb": &p.Amb} {
		v, err := strconv.ParseUint(st[key], 16, 64)
		if err != nil {
			return p, fmt.Errorf("/proc/%d/status %s %q: %w", pid, key, st[key], err)
		}
		*dst = v
	}
	p.NoNewPrivs, p.Seccomp = st["NoNewPrivs"], st["Seccomp"]
	p.Uid = strings.Fields(st["Uid"] + " ?")[0]
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return p, err
	}
	p.Mounts = map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 {
			p.Mounts[f[4]] = f[5] // the last mount at a point is the one seen
		}
	}
	return p, nil
}

// readOnly reports whether mount options say ro.
func readOnly(opts string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == "ro" {
			return true
		}
	}
	return false
}

// procUsage is a process's memory and CPU, and its cgroup's as the kubelet
// accounts them.
type procUsage struct {
	RSSKiB, HWMKiB, AnonKiB int64
	CPU                     time.Duration // utime + stime
	// WorkingSet is the memory cgroup's usage less its inactive file
	// pages: what the kubelet's eviction and `kubectl top` count.
	WorkingSet int64
	CgroupCPU  time.Duration // cpuacct.usage
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times.
const clockTick = 100

func readUsage(pid int) (procUsage, error) {
	var u procUsage
	st, err := procStatus(pid)
	if err != nil {
		return u, err
	}
	kib := func(key string) int64 {
		n, _ := strconv.ParseInt(strings.Fields(st[key] + " 0")[0], 10, 64)
		return n
	}
	u.RSSKiB, u.HWMKiB, u.AnonKiB = kib("VmRSS"), kib("VmHWM"), kib("RssAnon")
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command's closing parenthesis: state is the
	// first, utime the 12th, stime the 13th.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stt, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(ut+stt) * time.Second / clockTick
	mem, cpu, err := cgroupDirs(pid)
	if err != nil {
		return u, err
	}
	usage, err := readInt(filepath.Join(mem, "memory.usage_in_bytes"))
	if err != nil {
		return u, err
	}
	stat, err := os.ReadFile(filepath.Join(mem, "memory.stat"))
	if err != nil {
		return u, err
	}
	var inactive int64
	for _, l := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(l, "total_inactive_file "); ok {
			inactive, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	u.WorkingSet = max(0, usage-inactive)
	ns, err := readInt(filepath.Join(cpu, "cpuacct.usage"))
	if err != nil {
		return u, err
	}
	u.CgroupCPU = time.Duration(ns)
	return u, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// cgroupDirs finds pid's memory and cpuacct cgroups on cgroup v1, as
// start.sh runs the kubelet here (the cgroupfs driver): each controller's
// hierarchy where this machine mounts it, and the process's path in it.
func cgroupDirs(pid int) (mem, cpu string, err error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	root := map[string]string{} // controller → mount point
	for _, l := range strings.Split(string(mounts), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(g[2], ",") {
			root[o] = f[4]
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", "", err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			switch c {
			case "memory":
				mem = filepath.Join(root[c], f[2])
			case "cpuacct":
				cpu = filepath.Join(root[c], f[2])
			}
		}
	}
	if mem == "" || cpu == "" || root["memory"] == "" || root["cpuacct"] == "" {
		return "", "", fmt.Errorf("pid %d: no cgroup v1 memory and cpuacct hierarchies (%v) in %q", pid, root, b)
	}
	return mem, cpu, nil
}

// logRecord is one line of a container's log, decoded.
type logRecord map[string]any

// jsonLines decodes a container's log: one JSON object per line, each with
// a time, a level and a message. bad are the lines that are not.
func jsonLines(logs string) (recs []logRecord, bad []string) {
	for _, l := range strings.Split(strings.TrimRight(logs, "\n"), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var r logRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			bad = append(bad, l)
			continue
		}
		if _, ok := r["time"].(string); !ok {
			bad = append(bad, l)
			continue
		}
		if _, ok := r["level"].(string); !ok {
			bad = append(bad, l)
			continue
		}
		if _, ok := r["msg"].(string); !ok {
			bad = append(bad, l)
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad
}

// at is a record's time.
func (r logRecord) at() time.Time {
	s, _ := r["time"].(string)
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func (r logRecord) str(key string) string {
	s, _ := r[key].(string)
	return s
}
