package ovirt

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"

	ovirtclientlog "github.com/ovirt/go-ovirt-client-log/v3"
)

// scrubber removes a secret from text; it is the last line of defence
// behind Secret, for messages composed by the client library or quoted
// from the engine (a login error may echo the submitted form, where the
// password appears URL-encoded).
type scrubber struct{ forms []string }

func newScrubber(secret string) scrubber {
	if secret == "" {
		return scrubber{}
	}
	js, _ := json.Marshal(secret)
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret),
		strings.Trim(string(js), `"`), strings.Trim(strconv.Quote(secret), `"`)}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return scrubber{forms: slices.Compact(forms)}
}

func (s scrubber) text(msg string) string {
	for _, f := range s.forms {
		msg = strings.ReplaceAll(msg, f, redacted)
	}
	return msg
}

// err returns err with the secret removed from its message; errors.Is/As
// still reach the original through Unwrap.
func (s scrubber) err(err error) error {
	if err == nil || len(s.forms) == 0 {
		return err
	}
	msg := s.text(err.Error())
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

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
