package bootstrap

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestResolvScriptNetns runs the dispatcher script, and the script it hands
// over to, inside a node of a dual-stack lab with the real `ip`, while the
// node holds both API VIPs (the IPv6 one is listed before the node's own
// address): the node's own address goes first, never a VIP.
func TestResolvScriptNetns(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 1, Name: "resolv", IPv6: netip.MustParsePrefix("fd00:126::/64")})
	n := lab.Nodes[0]
	for name, doc := range map[string]string{
		"IPv4 first": `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: [192.168.126.0/24, "fd00:126::/64"]
  apiVIPs: [192.168.126.5, "fd00:126::5"]
  ingressVIPs: [192.168.126.6, "fd00:126::6"]
`,
		"IPv6 first": `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDRs: ["fd00:126::/64", 192.168.126.0/24]
  apiVIPs: ["fd00:126::5", 192.168.126.5]
  ingressVIPs: ["fd00:126::6", 192.168.126.6]
`,
	} {
		t.Run(name, func(t *testing.T) {
			cfg := mustParse(t, doc)
			want := n.IPv4.Addr().String()
			if name == "IPv6 first" {
				want = n.IPv6.Addr().String()
			}
			h, err := n.Handle()
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			link, err := h.LinkByName(n.Iface)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"192.168.126.5/24", "fd00:126::5/64"} {
				a, _ := netlink.ParseAddr(v)
				if err := h.AddrAdd(link, a); err != nil {
					t.Fatal(err)
				}
				defer h.AddrDel(link, a)
			}
			// The kernel lists the newest IPv6 address first: the VIP.
			if o, err := n.Run(context.Background(), "ip", "-o", "addr", "show", "to", "fd00:126::/64", "scope", "global"); err != nil || !strings.Contains(lines(o)[0], "fd00:126::5/") {
				t.Fatalf("the IPv6 VIP is not listed first, so skipping it goes untested: %v\n%s", err, o)
			}
			// The real ip inside the node; systemctl and nmcli stay
			// stand-ins, so nothing reaches this machine's own services.
			e := newResolvEnv(t, cfg)
			ipPath, err := exec.LookPath("ip")
			if err != nil {
				t.Fatal(err)
			}
			e.pathPrefix = filepath.Join(e.dir, "real")
			os.MkdirAll(e.pathPrefix, 0o755)
			if err := os.Symlink(ipPath, filepath.Join(e.pathPrefix, "ip")); err != nil {
				t.Fatal(err)
			}
			e.setNM("search example.com\nnameserver 192.168.126.1\n")
			args := append(e.env(), "bash", e.dispatcher, n.Iface, "up")
			if o, err := n.Run(context.Background(), "env", args...); err != nil {
				t.Fatalf("%v\n%s", err, o)
			}
			if got, w := e.resolv(), []string{"search ocp4.example.com example.com", "nameserver " + want, "nameserver 192.168.126.1"}; !slices.Equal(got, w) {
				t.Errorf("resolv.conf\n got %q\nwant %q", got, w)
			}
			if !e.done() {
				t.Error("no done flag")
			}
		})
	}
}
