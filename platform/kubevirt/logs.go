package kubevirt

import (
	"context"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// RouteClientLogs sends what the Kubernetes client libraries log to log:
// client-go's klog (throttling, retries, reflector messages) and
// controller-runtime's logger, so a JSON log carries no text lines. Both
// are process-wide loggers, so the command that wires a provider calls it
// once, not the provider itself.
func RouteClientLogs(log *slog.Logger) {
	klog.SetSlogLogger(log.With("component", "client-go"))
	// controller-runtime prints a stack trace to stderr when its logger was
	// never set and something logs through it after 30 s.
	ctrllog.SetLogger(logr.FromSlogHandler(log.With("component", "controller-runtime").Handler()))
}

// slogWarnings logs API server warnings (deprecations) through slog
// instead of the client library's global logger.
type slogWarnings struct{ log *slog.Logger }

func (w slogWarnings) HandleWarningHeaderWithContext(ctx context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.log.WarnContext(ctx, "kubevirt: API warning", "warning", text)
}
