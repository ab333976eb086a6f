package ovirt

import (
	"context"
	"fmt"
	"log/slog"

	ovirtclientlog "github.com/ovirt/go-ovirt-client-log/v3"
)

// clientLogger sends the client library's messages to slog, scrubbed. Its
// chatty progress lines go to Debug.
type clientLogger struct {
	log *slog.Logger
	s   scrubber
}

var _ ovirtclientlog.Logger = clientLogger{}

func (l clientLogger) Debugf(format string, args ...any) {
	l.log.Debug(l.s.text(fmt.Sprintf(format, args...)))
}
func (l clientLogger) Infof(format string, args ...any) {
	l.log.Debug(l.s.text(fmt.Sprintf(format, args...)))
}
func (l clientLogger) Warningf(format string, args ...any) {
	l.log.Warn(l.s.text(fmt.Sprintf(format, args...)))
}
func (l clientLogger) Errorf(format string, args ...any) {
	l.log.Error(l.s.text(fmt.Sprintf(format, args...)))
}
func (l clientLogger) WithContext(context.Context) ovirtclientlog.Logger { return l }
