package kubevirt

import (
	"strings"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		o    Options
		want string
	}{
		{Options{Network: "machine-net"}, ""},
		{Options{Network: "ocp/machine-net", Namespace: "ocp", RunStrategy: kubevirtv1.RunStrategyRerunOnFailure}, ""},
		{Options{}, "network: empty"},
		{Options{Network: "a/b/c"}, "a/b/c"},
		{Options{Network: "Bad_NS/x"}, "namespace"},
		{Options{Network: "x", Namespace: "Not_OK"}, "namespace \"Not_OK\""},
		{Options{Network: "x", RunStrategy: kubevirtv1.RunStrategyManual}, "runStrategy"},
		{Options{Network: "x", ImageDiskGiB: -1}, "imageDiskGiB"},
	}
	for _, tt := range tests {
		err := tt.o.validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tt.o, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: error %v, want one mentioning %q", tt.o, err, tt.want)
		}
	}
}
