//go:build kubelet

package e2e

import (
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKubeletLab: `appliance lab --kubelet` (make run KUBELET=1) plays the
// demo's scenario with every node's appliance run by a kubelet from the
// image, and holds to what the process lab holds to: the bootstrap serves
// first, its teardown (its manifest removed) fails no call, a dead
// master's VIP moves, the day-2 worker is answered by DNS.
func TestKubeletLab(t *testing.T) {
	tools := kubeletTools(t)
	img := buildNodeImage(t, "tier-1")
	start := time.Now()
	cmd := exec.Command(appliance(t), "lab", "--kubelet", "--kubelet-tools", tools.Dir, "--kubelet-assets", tools.Assets,
		"--kubelet-image", img.archive, "--kube-tools", "")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("appliance lab --kubelet (%s):\n%s", time.Since(start).Round(100*time.Millisecond), out.String())
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"kubelets started on bootstrap, master-0, master-1, master-2, worker-0, worker-1",
		"as its static pod, the appliance from " + img.ref,
		"bootstrap held the API VIP first:      true",
		"its static pod's manifest removed (as bootkube's teardown does); the kubelet stopped the appliance: exit 0",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the lab did not say %q", want)
		}
	}
	if !regexp.MustCompile(`bootstrap teardown: +VIP moved in [0-9.]+m?s; [1-9]\d* calls, 0 failed`).MatchString(s) {
		t.Error("calls failed through the bootstrap's teardown, or none were made")
	}
	if !regexp.MustCompile(`master-\d died: +longest outage [0-9.]+m?s`).MatchString(s) {
		t.Error("no master died, or its outage was not measured")
	}
	if !regexp.MustCompile(`day-2 worker answered by DNS: +[0-9.]+m?s after`).MatchString(s) || regexp.MustCompile(`day-2 worker answered by DNS: +0s after`).MatchString(s) {
		t.Error("the day-2 worker was not answered by DNS")
	}
}
