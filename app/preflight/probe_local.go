package preflight

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// TryBind binds spec's address as its service would and releases it at
// once; the error says whether the port is free. When it is taken, the
// holder is looked up in /proc.
func TryBind(ctx context.Context, spec PortSpec) PortObservation {
	o := PortObservation{Spec: spec}
	var lc net.ListenConfig
	switch spec.Proto {
	case "udp":
		pc, err := lc.ListenPacket(ctx, "udp", spec.Addr)
		if err == nil {
			pc.Close()
		}
		o.Err = err
	default:
		ln, err := lc.Listen(ctx, "tcp", spec.Addr)
		if err == nil {
			ln.Close()
		}
		o.Err = err
	}
	if errors.Is(o.Err, syscall.EADDRINUSE) {
		if _, p, err := net.SplitHostPort(spec.Addr); err == nil {
			if port, err := strconv.Atoi(p); err == nil {
				o.Holder = portHolder("/proc", spec.Proto, port)
			}
		}
	}
	return o
}

// socketInodes returns the inodes of sockets bound to port in the
// /proc/net/<proto>{,6} tables of the caller's network namespace: TCP
// sockets in LISTEN state, UDP sockets in any.
func socketInodes(procRoot, proto string, port int) map[string]bool {
	inodes := map[string]bool{}
	for _, f := range []string{proto, proto + "6"} {
		fh, err := os.Open(filepath.Join(procRoot, "net", f))
		if err != nil {
			continue
		}
		for _, ino := range parseSocketTable(bufio.NewScanner(fh), proto, port) {
			inodes[ino] = true
		}
		fh.Close()
	}
	return inodes
}

// parseSocketTable reads one /proc/net/{tcp,udp}[6] table and returns the
// inodes of the sockets on port (TCP: listening only). Lines it cannot read
// are skipped.
func parseSocketTable(sc *bufio.Scanner, proto string, port int) []string {
	var out []string
	first := true
	for sc.Scan() {
		if first {
			first = false // header
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		if proto == "tcp" && f[3] != "0A" { // TCP_LISTEN
			continue
		}
		if f[9] != "0" {
			out = append(out, f[9])
		}
	}
	return out
}

// portHolder names the processes owning a socket on port, e.g.
// "dnsmasq (pid 812)"; "" when none is found (another namespace's process,
// or no permission to read its fds).
func portHolder(procRoot, proto string, port int) string {
	inodes := socketInodes(procRoot, proto, port)
	if len(inodes) == 0 {
		return ""
	}
	dirs, _ := os.ReadDir(procRoot)
	var found []string
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(procRoot, d.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(procRoot, d.Name(), "fd", fd.Name()))
			if err != nil {
				continue
			}
			ino, ok := strings.CutPrefix(link, "socket:[")
			if ok && inodes[strings.TrimSuffix(ino, "]")] {
				comm, _ := os.ReadFile(filepath.Join(procRoot, d.Name(), "comm"))
				name := strings.TrimSpace(string(comm))
				if name == "" {
					name = "a process"
				}
				found = append(found, fmt.Sprintf("%s (pid %d)", name, pid))
				break
			}
		}
	}
	slices.Sort(found)
	return strings.Join(slices.Compact(found), ", ")
}

// mtuLadder is the IP packet sizes tried below the interface MTU, so a
// failure can say what does get through: jumbo, Ethernet, PPPoE, common
// tunnel overheads, the IPv6 minimum.
var mtuLadder = []int{9000, 1500, 1492, 1450, 1400, 1280}

// ProbeSizes returns the sizes probed for an interface MTU: the MTU itself
// and the smaller ladder steps.
func ProbeSizes(mtu int) []int {
	out := []int{mtu}
	for _, s := range mtuLadder {
		if s < mtu {
			out = append(out, s)
		}
	}
	return out
}

// ProbePathMTU sends ICMP echo requests of each size with Don't Fragment
// set (IP_PMTUDISC_PROBE: the kernel neither fragments nor trusts a cached
// path MTU) from ifname to gw, twice each, and reports which sizes got an
// echo reply within wait. IPv4 only.
func ProbePathMTU(ctx context.Context, ifname string, gw netip.Addr, sizes []int, wait time.Duration) (map[int]bool, error) {
	if !gw.Is4() {
		return nil, fmt.Errorf("gateway %s is IPv6; only IPv4 paths are probed", gw)
	}
	lc := net.ListenConfig{Control: func(network, addr string, c syscall.RawConn) error {
		if err := bindToDevice(ifname)(network, addr, c); err != nil {
			return err
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(ctx, "ip4:icmp", "0.0.0.0")
	if err != nil {
		return nil, fmt.Errorf("ICMP socket on %s: %w", ifname, err)
	}
	defer pc.Close()
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := int(binary.BigEndian.Uint16(idb[:]))
	answered := map[int]bool{}
	for _, s := range sizes {
		answered[s] = false
	}
	dst := &net.IPAddr{IP: gw.AsSlice()}
	const ipICMPHdr = 20 + 8
	send := func() error {
		for i, s := range sizes {
			if s <= ipICMPHdr {
				continue
			}
			m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: i, Data: make([]byte, s-ipICMPHdr)}}
			b, err := m.Marshal(nil)
			if err != nil {
				return fmt.Errorf("echo request: %w", err)
			}
			if _, err := pc.WriteTo(b, dst); err != nil && !errors.Is(err, syscall.EMSGSIZE) {
				return fmt.Errorf("send echo request to %s: %w", gw, err)
			}
		}
		return nil
	}
	if err := send(); err != nil {
		return nil, err
	}
	resend := time.AfterFunc(wait/3, func() { _ = send() })
	defer resend.Stop()
	_ = pc.SetReadDeadline(time.Now().Add(wait))
	stop := context.AfterFunc(ctx, func() { _ = pc.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return answered, nil // deadline: what answered, answered
		}
		if ia, ok := from.(*net.IPAddr); !ok || !ia.IP.Equal(dst.IP) {
			continue
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		e, ok := m.Body.(*icmp.Echo)
		if !ok || e.ID != id || e.Seq < 0 || e.Seq >= len(sizes) || len(e.Data)+ipICMPHdr != sizes[e.Seq] {
			continue
		}
		answered[sizes[e.Seq]] = true
	}
}
