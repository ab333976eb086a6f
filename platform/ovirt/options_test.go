package ovirt

import (
	"context"
	"strings"
	"testing"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
)

func TestOptionsValidated(t *testing.T) {
	mock := ovirtclient.NewMock()
	if _, err := NewWithClient(context.Background(), mock, Options{}, nil); err == nil ||
		!strings.Contains(err.Error(), "clusterID") || !strings.Contains(err.Error(), "vnicProfileID") {
		t.Fatalf("err = %v", err)
	}
	e := newEnv(t, nil)
	o := e.opts
	o.StorageDomainID = "00000000-0000-0000-0000-000000000000"
	if _, err := NewWithClient(context.Background(), e.mock, o, nil); err == nil || !strings.Contains(err.Error(), "storageDomainID") {
		t.Fatalf("err = %v", err)
	}
}
