package bootstrap

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"appliance/internal/cluster"
)

// testImage is a reference by digest, as `make image` prints it.
const testImage = "registry.example.com/appliance@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// testConfigYAML is a cluster with every role, a DHCP pool and an authPass.
const testConfigYAML = `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  gateway: 192.168.126.1
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
  upstreamDNS: [192.168.126.1, "[2001:db8::53]:5353"]
nodes:
  - {name: bootstrap, role: bootstrap, mac: "52:54:00:7e:00:09", ips: [192.168.126.9]}
  - {name: master-0,  role: master,    mac: "52:54:00:7e:00:10", ips: [192.168.126.10]}
  - {name: worker-0,  role: worker,    ips: [192.168.126.20]}
vrrp: {version: 2, authPass: s3cret, advertInterval: 2s, preemptDelay: 5s, unicastPeers: [192.168.126.10, 192.168.126.9], priority: 100}
dhcp: {enabled: true, leaseTime: 2h, pool: {start: 192.168.126.100, end: 192.168.126.199}, dns: [192.168.126.10], ntp: [192.168.126.1], searchDomains: [ocp4.example.com]}
lb: {balance: leastconn, mcs: false}
dns: {mdns: true, allowFrom: [10.128.0.0/14]}
admin: {listen: "127.0.0.1:9447"}
provision:
  platform: libvirt
  libvirt: {uri: "qemu:///system", pool: default, network: default}
`

func mustParse(t testing.TB, doc string) *cluster.Config {
	t.Helper()
	cfg, err := cluster.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// testServices stands in for app/node's plan (cmd wires the real one):
// bootstrap and masters run everything, workers run DNS.
func testServices(role cluster.Role) RoleServices { return RoleServices{Runs: true, DNS: true} }

func testOptions() Options {
	return Options{Image: testImage, Drain: 10 * time.Second, Services: testServices}
}

// needTool returns a tool's path, skipping the test without it (failing
// under CI=true, where `make test-deps` installed it).
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		for _, dir := range []string{"/usr/lib/dracut/modules.d/30ignition"} {
			if fi, err := os.Stat(dir + "/" + name); err == nil && !fi.IsDir() {
				return dir + "/" + name
			}
		}
		msg := name + " not found (Debian package ignition: apt-get install -y ignition)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

func lines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
