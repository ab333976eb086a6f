package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"appliance/internal/netlab/netlabtest"
)

// writeDNSConfig writes a one-master config, with upstream as its upstream
// DNS when given.
func writeDNSConfig(t *testing.T, upstream string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "appliance.yaml")
	y := "cluster: {name: ocp4, baseDomain: example.com}\nnetwork:\n  machineCIDR: 192.168.126.0/24\n  apiVIPs: [192.168.126.5]\n  ingressVIPs: [192.168.126.6]\n"
	if upstream != "" {
		y += "  upstreamDNS: [\"" + upstream + "\"]\n"
	}
	y += "nodes:\n  - {name: master-0, role: master, ips: [192.168.126.10]}\n"
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDNSCommandNoUpstream: with no upstream left, `appliance dns` exits
// with an error saying why and which setting to change.
func TestDNSCommandNoUpstream(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(selfExe(t), "dns", "--config", writeDNSConfig(t, ""), "--listen", netlabtest.FreeLoopbackAddr(t), "--admin-listen", netlabtest.FreeLoopbackAddr(t), "--resolv-conf", resolv)
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	out, err := cmd.CombinedOutput()
	want := "dns: no upstream resolver left after removing this node's own addresses from " + resolv + " (nameserver 127.0.0.1); set network.upstreamDNS"
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("err %v, output:\n%s\nwant %s", err, out, want)
	}
}
