package lab

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"appliance/internal/apptest"
	"appliance/internal/netlab/netlabtest"
)

// applianceBin builds the binary the lab's nodes run (or takes
// $APPLIANCE_BIN), as `make build` does.
func applianceBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("APPLIANCE_BIN"); p != "" {
		return p
	}
	return apptest.Build(t)
}

// TestLab plays the whole scenario with short pauses and holds it to its
// claims: the bootstrap serves first, its teardown fails no call, a dead
// master's outage is bounded, and a day-2 worker reaches DNS.
func TestLab(t *testing.T) {
	netlabtest.RequireRoot(t)
	exe := applianceBin(t)
	// The day-2 worker joins through the Kubernetes API where `make test`
	// provides one (KUBEBUILDER_ASSETS) and appliance run watches Nodes,
	// else through mDNS.
	kube := KubeOptions{Tools: "../../../shared/tools/kube-apiserver", Assets: os.Getenv("KUBEBUILDER_ASSETS")}
	if help, err := exec.Command(exe, "run", "--help").Output(); err == nil {
		kube.RunKubeconfig = strings.Contains(string(help), "--kubeconfig")
	}
	wantVia := "mdns"
	if kube.RunKubeconfig && kube.Assets != "" {
		wantVia = "kubernetes"
	}
	var out bytes.Buffer
	start := time.Now()
	res, err := Run(t.Context(), Options{Exe: exe, Out: &out, AdvertInterval: 100 * time.Millisecond, Pace: 0.3, Kube: kube})
	t.Logf("lab output (%s):\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.BootstrapHeldVIP {
		t.Error("the bootstrap never held the API VIP")
	}
	if res.MCSBefore != "bootstrap" || !strings.HasPrefix(res.MCSAfter, "master-") {
		t.Errorf("worker Ignition served by %q then %q; want the bootstrap's MCS, then a master's", res.MCSBefore, res.MCSAfter)
	}
	if res.HandoverCalls < 20 {
		t.Errorf("only %d calls through the teardown: the client did not run", res.HandoverCalls)
	}
	if res.HandoverFailed > 0 {
		t.Errorf("%d calls failed through the bootstrap teardown; want 0", res.HandoverFailed)
	}
	// A call in flight when the VIP moves is passed back to the bootstrap,
	// which left alive; a move by Master_Down among loaded masters is not,
	// and may reset one.
	if res.HandoverReset > 1 {
		t.Errorf("%d calls reset in flight through the teardown; want none (one if a late advert moved the VIP again)", res.HandoverReset)
	}
	if !strings.Contains(res.DHCPReserved, "ACK 192.168.") || !strings.Contains(res.DHCPReserved, "worker-0") {
		t.Errorf("worker-0's reservation: %q", res.DHCPReserved)
	}
	if !strings.Contains(res.DHCPPool, "ACK 192.168.") || !regexp.MustCompile(`ACK \d+\.\d+\.\d+\.1(0\d|1\d) `).MatchString(res.DHCPPool) {
		t.Errorf("the day-2 worker from the pool (.100-.119): %q", res.DHCPPool)
	}
	// Master_Down (~0.35 s at 100 ms adverts) plus the LBs' checks taking
	// the dead apiserver out (3 x 1 s); calls that land on it meanwhile
	// time out after 2 s.
	if res.Killed == "" || res.KillOutage > 6*time.Second {
		t.Errorf("killing %q: outage %s; want it under 6 s", res.Killed, res.KillOutage)
	}
	if res.Day2Via != wantVia {
		t.Errorf("the day-2 worker joined through %q, want %q", res.Day2Via, wantVia)
	}
	if res.Day2DNS <= 0 || res.Day2DNS > 10*time.Second {
		t.Errorf("day-2 worker (%s) answered by DNS after %s (%q); want within 10 s", res.Day2Via, res.Day2DNS, res.Day2Answer)
	}
}
