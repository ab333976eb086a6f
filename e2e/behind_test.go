package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"appliance/internal/netlab"
)

// client is a network namespace hanging off one node by a veth pair, as a
// pod hangs off its node's ovn-k8s-mp0: the node's end is named ifname and
// holds nodeAddrs, the client's holds clientAddrs and routes everything
// through the node.
type client struct {
	ns string
}

// behind creates a client of n (removed when the test ends).
func behind(t *testing.T, l *netlab.Lab, n *netlab.Node, label, ifname string, nodeAddrs, clientAddrs []string) *client {
	t.Helper()
	c := &client{ns: l.Prefix() + "-" + label}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", c.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", c.ns).Run() })
	// Made inside the node, so no link ever exists in the machine's own
	// namespace.
	if _, err := n.Run(context.Background(), "ip", "link", "add", ifname, "type", "veth", "peer", "name", "eth0", "netns", c.ns); err != nil {
		t.Fatal(err)
	}
	for _, a := range nodeAddrs {
		if _, err := n.Run(context.Background(), "ip", "addr", "add", a, "dev", ifname); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Run(context.Background(), "ip", "link", "set", ifname, "up"); err != nil {
		t.Fatal(err)
	}
	for _, a := range clientAddrs {
		run("ip", "-n", c.ns, "addr", "add", a, "dev", "eth0")
	}
	run("ip", "-n", c.ns, "link", "set", "lo", "up")
	run("ip", "-n", c.ns, "link", "set", "eth0", "up")
	via, _, _ := strings.Cut(nodeAddrs[0], "/")
	run("ip", "-n", c.ns, "route", "add", "default", "via", via)
	return c
}

// dig asks server for name from the client, from source address src when
// given, with the real dig.
func (c *client) dig(t *testing.T, server, src, qtype, name string) string {
	t.Helper()
	args := []string{"netns", "exec", c.ns, "dig", "+tries=1", "+time=2", "@" + server}
	if src != "" {
		args = append(args, "-b", src)
	}
	if qtype == "PTR" {
		args = append(args, "-x", name)
	} else {
		args = append(args, qtype, name)
	}
	out, _ := exec.Command("ip", args...).CombinedOutput()
	return digSummary(string(out))
}
