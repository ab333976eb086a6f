package preflight

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"appliance/internal/cluster"
)

// Listens are the addresses the node's services bind, as the service
// packages define them; the command fills them in so this package needs no
// service import.
type Listens struct {
	DNS   string // e.g. ":53" (UDP and TCP)
	DHCP  string // e.g. ":67" (UDP)
	APILB string // e.g. ":9445"
	MCSLB string // e.g. ":9446"
	Admin string // e.g. "127.0.0.1:9447"
	NoMCS bool   // the MCS is not balanced (lb.mcs: false)
}

// PortSpec is one socket a service on the node will bind.
type PortSpec struct {
	Proto   string `json:"proto"` // "tcp" or "udp"
	Addr    string `json:"addr"`  // host:port as the service binds it
	Purpose string `json:"purpose"`
}

// ID is the stable check ID: port.<port>-<proto>.
func (p PortSpec) ID() string {
	_, port, _ := net.SplitHostPort(p.Addr)
	return fmt.Sprintf("%s.%s-%s", IDPort, port, p.Proto)
}

// NodePorts lists the sockets role's services bind on a node: DNS and the
// admin endpoint everywhere (every node resolves through its own DNS), and
// on the bootstrap and control-plane nodes also DHCP and the API and MCS
// load balancers, which follow the API VIP.
func NodePorts(role cluster.Role, l Listens) []PortSpec {
	out := []PortSpec{
		{"udp", l.DNS, "cluster DNS"},
		{"tcp", l.DNS, "cluster DNS"},
	}
	if role == cluster.RoleBootstrap || role == cluster.RoleMaster {
		out = append(out, PortSpec{"udp", l.DHCP, "DHCP server"})
		out = append(out, PortSpec{"tcp", l.APILB, "API load balancer (VIP:6443 is redirected here)"})
		if !l.NoMCS {
			out = append(out, PortSpec{"tcp", l.MCSLB, "Machine Config Server load balancer (VIP:22623 is redirected here)"})
		}
	}
	out = append(out, PortSpec{"tcp", l.Admin, "admin endpoint"})
	return slices.DeleteFunc(out, func(p PortSpec) bool { return p.Addr == "" })
}

// PortObservation is the outcome of binding one PortSpec.
type PortObservation struct {
	Spec PortSpec
	// Err is the bind error, nil when the port was free.
	Err error
	// Holder names the process bound to the port, when it could be found
	// ("dnsmasq (pid 812)").
	Holder string
}

// DecidePort fails when the port is taken, naming the holder when known.
func DecidePort(o PortObservation) Result {
	id := o.Spec.ID()
	d := map[string]any{"proto": o.Spec.Proto, "addr": o.Spec.Addr, "purpose": o.Spec.Purpose}
	if o.Holder != "" {
		d["holder"] = o.Holder
	}
	switch {
	case o.Err == nil:
		return pass(id, "%s/%s is free for the %s", o.Spec.Addr, o.Spec.Proto, o.Spec.Purpose).with(d)
	case errors.Is(o.Err, syscall.EADDRINUSE) && strings.HasPrefix(o.Holder, "appliance "):
		return warn(id, "%s/%s is held by %s: the appliance already runs on this node; stop it to check the port for a fresh install",
			o.Spec.Addr, o.Spec.Proto, o.Holder).with(d)
	case errors.Is(o.Err, syscall.EADDRINUSE):
		who := "another program"
		if o.Holder != "" {
			who = o.Holder
		}
		return fail(id, "%s/%s, which the %s needs, is in use by %s; stop it or move it to another port",
			o.Spec.Addr, o.Spec.Proto, o.Spec.Purpose, who).with(d)
	case errors.Is(o.Err, syscall.EACCES), errors.Is(o.Err, syscall.EPERM):
		return skipped(id, "cannot tell whether %s/%s is free: binding it needs root (or CAP_NET_BIND_SERVICE); run preflight as root",
			o.Spec.Addr, o.Spec.Proto).with(d)
	case errors.Is(o.Err, syscall.EADDRNOTAVAIL):
		return fail(id, "%s/%s for the %s: the address is not on this machine; fix the listen address",
			o.Spec.Addr, o.Spec.Proto, o.Spec.Purpose).with(d)
	}
	return warn(id, "could not test %s/%s: %v", o.Spec.Addr, o.Spec.Proto, o.Err).with(d)
}

// MTUObservation is what echo requests with Don't Fragment set found on the
// way to the gateway.
type MTUObservation struct {
	Iface   string
	MTU     int
	Gateway netip.Addr
	// Answered maps each IP packet size sent to whether an echo reply came.
	Answered map[int]bool
	Err      error
}

// DecideMTU passes when a packet of the interface's full MTU reaches the
// gateway unfragmented. When only smaller ones do, some hop on the way
// (a switch port, a tunnel) carries less than the interface thinks, and
// large packets (TLS handshakes, image pulls) will vanish: that fails,
// naming the largest size that got through.
func DecideMTU(o MTUObservation) Result {
	d := map[string]any{"interface": o.Iface, "mtu": o.MTU, "gateway": o.Gateway, "answered": o.Answered}
	if o.Err != nil {
		return warn(IDMTU, "path MTU to the gateway %s not probed: %v", o.Gateway, o.Err).with(d)
	}
	if o.Answered[o.MTU] {
		return pass(IDMTU, "%d-byte packets with Don't Fragment reach the gateway %s from %s (its MTU)", o.MTU, o.Gateway, o.Iface).with(d)
	}
	best := 0
	var tried []string
	for size, ok := range o.Answered {
		if ok {
			best = max(best, size)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(o.Answered)) {
		tried = append(tried, fmt.Sprint(s))
	}
	if best == 0 {
		return warn(IDMTU, "the gateway %s answered none of the echo requests (sizes %s); MTU not verified (is ICMP echo blocked?)",
			o.Gateway, strings.Join(tried, ", ")).with(d)
	}
	return fail(IDMTU, "%s has MTU %d but only %d-byte packets reach the gateway %s unfragmented; set the interface MTU to %d or raise it along the path",
		o.Iface, o.MTU, best, o.Gateway, best).with(d)
}
