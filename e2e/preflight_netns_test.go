package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"appliance/internal/netlab"
	"appliance/internal/netlab/netlabtest"
)

// TestPreflightAgreesWithApplianceDNS: the project's own DNS, serving the
// same config, passes every DNS check, wildcard included: what preflight
// demands of a site's DNS is what `appliance dns` answers.
func TestPreflightAgreesWithApplianceDNS(t *testing.T) {
	lab := netlabtest.New(t, netlab.Options{Nodes: 2, Name: "pfdns"})
	n0, n1 := lab.Nodes[0], lab.Nodes[1]
	path := writeFile(t, "appliance.yaml", fmt.Sprintf(`cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
  upstreamDNS: [192.168.126.99]  # inside the lab: nothing leaves it
nodes:
  - {name: master-0, role: master, mac: "%s", ips: [192.168.126.10]}
  - {name: master-1, role: master, mac: "%s", ips: [192.168.126.11]}
  - {name: worker-0, role: worker, ips: [192.168.126.20]}
`, n0.MAC, n1.MAC))
	startAppliance(t, n1, "dns", "--config", path, "--listen", "192.168.126.11:53", "--admin-listen", "127.0.0.1:0")
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _ := n1.Run(context.Background(), "ss", "-lnuH", "sport = :53")
		if strings.Contains(out, "192.168.126.11:53") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("appliance dns did not start listening within 15s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := n0.Command(ctx, appliance(t), "--log-format", "text", "preflight", "--config", path,
		"-o", "json", "--resolver", "192.168.126.11", "--probe-wait", "300ms", "--dhcp-wait", "500ms", "--vrrp-listen", "500ms")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := netlab.StartCommand(cmd); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // the exit status is checked through the results
	rs := decodeResults(t, stdout.String())
	seen := 0
	for _, r := range rs {
		if strings.HasPrefix(r.ID, "dns") {
			seen++
			if r.Status != "pass" {
				t.Errorf("%s: %s: %s", r.ID, r.Status, r.Message)
			}
		}
	}
	// resolver, api, api-int, apps, wildcard, and a name and PTR per node.
	if seen != 5+2*3 {
		t.Errorf("%d DNS checks ran, want 11:\n%s\n%s", seen, stdout.String(), stderr.String())
	}
}

// preflightResult is one check of `appliance preflight -o json`.
type preflightResult struct {
	ID      string          `json:"id"`
	Status  string          `json:"status"`
	Message string          `json:"message"`
	Details json.RawMessage `json:"details"`
}

// decodeResults parses the output of `appliance preflight -o json`.
func decodeResults(t *testing.T, out string) []preflightResult {
	t.Helper()
	var rs []preflightResult
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("-o json output is not a JSON list: %v\n%s", err, out)
	}
	return rs
}
