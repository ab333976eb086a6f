package libvirt

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestLibvirtSecretNotInErrors(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, uri := range []string{
		"qemu+tcp://admin:" + secret + "@127.0.0.1:1/system",
		"qemu+tls://admin:" + secret + "@127.0.0.1:1/system?pkipath=/nonexistent",
		"qemu:///system?socket=/nonexistent/" + secret,
		"%zz" + secret,
	} {
		_, err := New(context.Background(), Options{URI: uri}, log)
		if err == nil {
			t.Fatalf("connecting to %s succeeded", uri)
		}
		if strings.Contains(err.Error(), "Pa55") && !strings.Contains(uri, "socket=") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	if strings.Contains(logBuf.String(), secret) {
		t.Errorf("log leaks the password: %s", logBuf.String())
	}
}
