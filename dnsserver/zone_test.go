package dnsserver

import (
	"slices"
	"strings"
	"testing"
)

func TestConfigRecords(t *testing.T) {
	var got []string
	for _, rr := range ConfigRecords(testConfig(), 30) {
		got = append(got, rr.String())
	}
	want := []string{
		"ocp4.example.com.\t30\tIN\tSOA\tapi-int.ocp4.example.com. hostmaster.ocp4.example.com. 1 3600 600 86400 30",
		"ocp4.example.com.\t30\tIN\tNS\tapi-int.ocp4.example.com.",
		"api.ocp4.example.com.\t30\tIN\tA\t192.168.126.5",
		"api.ocp4.example.com.\t30\tIN\tAAAA\tfd00::5",
		"api-int.ocp4.example.com.\t30\tIN\tA\t192.168.126.5",
		"api-int.ocp4.example.com.\t30\tIN\tAAAA\tfd00::5",
		"*.apps.ocp4.example.com.\t30\tIN\tA\t192.168.126.6",
		"master-0.ocp4.example.com.\t30\tIN\tA\t192.168.126.10",
		"master-0.ocp4.example.com.\t30\tIN\tAAAA\tfd00::10",
		"worker-0.ocp4.example.com.\t30\tIN\tA\t192.168.126.20",
		"10.126.168.192.in-addr.arpa.\t30\tIN\tPTR\tmaster-0.ocp4.example.com.",
		"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.\t30\tIN\tPTR\tmaster-0.ocp4.example.com.",
		"20.126.168.192.in-addr.arpa.\t30\tIN\tPTR\tworker-0.ocp4.example.com.",
		"5.126.168.192.in-addr.arpa.\t30\tIN\tPTR\tapi.ocp4.example.com.",
		"5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.\t30\tIN\tPTR\tapi.ocp4.example.com.",
		"6.126.168.192.in-addr.arpa.\t30\tIN\tPTR\tingress.apps.ocp4.example.com.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
