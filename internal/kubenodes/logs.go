package kubenodes

import (
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

var routeOnce sync.Once

// routeClientLogs sends klog (client-go's process-wide logger: reflector,
// retries, throttling) through log, so a JSON log carries no text lines.
// Only the first call does it: klog has one logger per process, and a
// second Watcher must not swap it under the first one's feet. Each
// Watcher's informer logs through its own logger anyway, by context.
func routeClientLogs(log *slog.Logger) {
	routeOnce.Do(func() { klog.SetSlogLogger(log.With("component", "client-go")) })
}
