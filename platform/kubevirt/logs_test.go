package kubevirt

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// TestRouteClientLogs: what client-go (klog) and controller-runtime log
// comes out as our JSON, not as klog's text lines.
func TestRouteClientLogs(t *testing.T) {
	var buf bytes.Buffer
	RouteClientLogs(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { klog.ClearLogger() })
	klog.Info("Waited before sending request")
	klog.Warningf("throttled %d", 3)
	ctrllog.Log.WithName("client").Info("from controller-runtime", "key", "v")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Errorf("not JSON: %s", l)
			continue
		}
		if v["component"] == nil {
			t.Errorf("no component: %s", l)
		}
	}
	if !strings.Contains(buf.String(), `"msg":"Waited before sending request"`) || !strings.Contains(buf.String(), `"component":"client-go"`) {
		t.Errorf("klog's message not found as JSON:\n%s", buf.String())
	}
}
