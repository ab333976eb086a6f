package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCmdSplit runs `appliance ARGS...` in-process and returns standard
// output and standard error apart, and the error main would exit with.
func runCmdSplit(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--log-format", "text", "--log-level", "warn"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

const onPremInstallConfig = `apiVersion: v1
metadata: {name: ocp4}
baseDomain: example.com
networking:
  machineNetwork: [{cidr: 192.168.126.0/24}]
  clusterNetwork: [{cidr: 10.132.0.0/14, hostPrefix: 23}]
platform:
  baremetal: {apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}
`

// config check accepts an on-prem install-config but warns that the
// installer deploys OpenShift's own stack next to the appliance.
func TestConfigCheckWarnsOnPremStack(t *testing.T) {
	out, errOut, err := runCmdSplit(t, "config", "check", writeConfig(t, onPremInstallConfig))
	if err != nil {
		t.Fatalf("config check: %v", err)
	}
	for _, w := range []string{"ok: cluster ocp4.example.com", "VRRP native unicast", "pod networks [10.132.0.0/14]"} {
		if !strings.Contains(out, w) {
			t.Errorf("output %q lacks %q", out, w)
		}
	}
	for _, w := range []string{"warning: platform baremetal with VIPs", "keepalived, haproxy, coredns", "platform none"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr %q lacks %q", errOut, w)
		}
	}
	out, errOut, err = runCmdSplit(t, "config", "check", writeConfig(t, "cluster: {name: ocp4, baseDomain: example.com}\n"+
		"network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5]}\n"))
	if err != nil || errOut != "" || !strings.Contains(out, "ok") {
		t.Errorf("an appliance.yaml: %q %q %v, want ok and no warning", out, errOut, err)
	}
}

// run refuses to start where the kubelet's static pod folder holds
// OpenShift's own keepalived, naming the file and the ways out.
func TestRunRefusesNextToOnPremStack(t *testing.T) {
	manifests := t.TempDir()
	if err := os.WriteFile(filepath.Join(manifests, "keepalived.yaml"), []byte("kind: Pod\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "cluster: {name: ocp4, baseDomain: example.com}\n"+
		"network: {machineCIDR: 192.168.126.0/24, apiVIPs: [192.168.126.5], ingressVIPs: [192.168.126.6]}\n"+
		"nodes: [{name: master-0, role: master, ips: [192.168.126.10]}]\n")
	_, _, err := runCmdSplit(t, "run", "--config", cfg, "--node", "master-0", "--kubelet-manifests", manifests,
		"--admin-listen", "127.0.0.1:0")
	if err == nil {
		t.Fatal("run started next to OpenShift's keepalived")
	}
	for _, w := range []string{filepath.Join(manifests, "keepalived.yaml"), "VRIDs", "vrrp.enabled: false", "platform none"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}
