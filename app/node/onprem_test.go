package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckOnPremStack(t *testing.T) {
	all := Plan{APIVIP: true, IngressVIP: true, LB: true, DNS: true}
	for _, c := range []struct {
		name  string
		files []string
		plan  Plan
		want  []string // substrings of the error; none: no error
	}{
		{name: "clean node", plan: all},
		{name: "keepalived", files: []string{"keepalived.yaml"}, plan: all,
			want: []string{"keepalived.yaml (it claims the API and ingress VIPs and their VRIDs; or set vrrp.enabled: false)", "platform none"}},
		{name: "whole stack", files: []string{"keepalived.yaml", "haproxy.yaml", "coredns.yaml", "kube-apiserver-pod.yaml"}, plan: all,
			want: []string{"keepalived.yaml", "haproxy.yaml (it claims port 9445", "coredns.yaml (it claims port 53"}},
		{name: "coredns with our DNS off", files: []string{"coredns.yaml"}, plan: Plan{APIVIP: true, LB: true}},
		{name: "worker with haproxy only", files: []string{"haproxy.yaml"}, plan: Plan{IngressVIP: true, DNS: true}},
		{name: "the appliance's own pod", files: []string{"appliance.yaml"}, plan: all},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("kind: Pod\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckOnPremStack(dir, c.plan)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("want no error, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error naming %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
	if err := CheckOnPremStack(filepath.Join(t.TempDir(), "absent"), all); err != nil {
		t.Errorf("a missing folder (no kubelet) is no conflict: %v", err)
	}
	if err := CheckOnPremStack("", all); err != nil {
		t.Errorf("an empty folder name skips the check: %v", err)
	}
}
