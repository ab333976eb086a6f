// Package libvirttest starts a private libvirtd for tests: in its own mount,
// network and PID namespaces, so the host's libvirt, links, addresses and
// firewall are never touched, and every qemu it starts dies with it.
package libvirttest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"appliance/internal/netlab/netlabtest"
)

// Daemon is a libvirtd the test started in its own mount and network
// namespaces: tmpfs over its state directories, a private /etc/libvirt with
// no networks, so neither the host's libvirt nor the root namespace's
// links, addresses and firewall are touched. Its socket is reached through
// /proc/PID/root.
type Daemon struct {
	PID    int // the namespace's init shell; libvirtd shares its mount and network namespaces
	Socket string
	Dir    string
}

const daemonScript = `set -e
for d in /run /var/lib/libvirt /var/cache/libvirt /var/log/libvirt /etc/libvirt; do
  mount -t tmpfs -o mode=0755 tmpfs "$d"
done
mkdir -p /run/libvirt
cat > /etc/libvirt/libvirtd.conf <<EOF
auth_unix_ro = "none"
auth_unix_rw = "none"
unix_sock_rw_perms = "0700"
log_outputs = "3:stderr"
EOF
cat > /etc/libvirt/qemu.conf <<EOF
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = "file"
EOF
# Not exec: this shell stays PID 1 of the namespace and reaps the qemu
# processes libvirtd daemonizes (libvirtd reaps only its own children).
libvirtd
exit $?
`

// Start starts a private libvirtd and registers its teardown, which
// kills every process left in its network namespace (qemu included).
func Start(t testing.TB) *Daemon {
	t.Helper()
	netlabtest.RequireRoot(t)
	for _, bin := range []string{"libvirtd", "unshare", "qemu-img"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed (Debian libvirt-daemon-system, qemu-utils)", bin)
			}
			t.Skipf("%s not installed", bin)
		}
	}
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "libvirtd.log"))
	if err != nil {
		t.Fatal(err)
	}
	// A PID namespace too, with the script's shell as its init: when it is
	// killed, the kernel kills libvirtd and every qemu. If the test binary
	// is killed, unshare gets SIGKILL (Pdeathsig) and --kill-child passes
	// it on to that init.
	cmd := exec.Command("unshare", "--mount", "--net", "--pid", "--kill-child=SIGKILL", "--mount-proc",
		"--propagation", "private", "--", "sh", "-c", daemonScript)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start libvirtd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d := &Daemon{Dir: dir}
	t.Cleanup(func() {
		var others []int
		if d.PID != 0 {
			if netns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", d.PID)); netns != "" {
				others = PIDsInNetns(netns, d.PID)
			}
			_ = syscall.Kill(d.PID, syscall.SIGKILL)
		}
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		// Normally gone with the PID namespace already.
		for _, pid := range others {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("libvirtd log tail:\n%s", b)
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if d.PID == 0 {
			// unshare's forked child: the namespace's init shell.
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)); err == nil {
				if f := strings.Fields(string(b)); len(f) > 0 {
					d.PID, _ = strconv.Atoi(f[0])
					d.Socket = fmt.Sprintf("/proc/%d/root/run/libvirt/libvirt-sock", d.PID)
				}
			}
		}
		if _, err := os.Stat(d.Socket); d.PID != 0 && err == nil {
			if c, err := d.Conn("qemu:///system"); err == nil {
				_ = c.Disconnect()
				return d
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("libvirtd exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("libvirtd socket did not appear within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PIDsInNetns lists processes (other than skip) in the network namespace
// named by link ("net:[inode]"): the daemon's qemu and helper processes.
func PIDsInNetns(link string, skip int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == skip {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && l == link {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Conn is a raw connection for test setup and inspection.
func (d *Daemon) Conn(uri string) (*golibvirt.Libvirt, error) {
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(d.Socket), dialers.WithLocalTimeout(2*time.Second)))
	if err := l.ConnectToURI(golibvirt.ConnectURI(uri)); err != nil {
		return nil, err
	}
	return l, nil
}

// Uniq is a short random suffix for names two runs must not share.
func Uniq() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// QemuImg runs qemu-img.
func QemuImg(t testing.TB, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command("qemu-img", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

// Pool defines and starts a dir storage pool named name in a new directory
// under the daemon's, returning that directory.
func (d *Daemon) Pool(t testing.TB, l *golibvirt.Libvirt, name string) string {
	t.Helper()
	dir := filepath.Join(d.Dir, name)
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	pl, err := l.StoragePoolDefineXML(fmt.Sprintf(`<pool type="dir"><name>%s</name><target><path>%s</path></target></pool>`, name, dir), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.StoragePoolCreate(pl, 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Network defines and starts an isolated network (no forward, no address on
// the daemon's side) with a bridge named br; it exists only inside the
// daemon's network namespace.
func (d *Daemon) Network(t testing.TB, l *golibvirt.Libvirt, name, br string) {
	t.Helper()
	nw, err := l.NetworkDefineXML(fmt.Sprintf(`<network><name>%s</name><bridge name="%s" stp="off"/></network>`, name, br))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.NetworkCreate(nw); err != nil {
		t.Fatal(err)
	}
}
