package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// drainLimit bounds how much of a response body a check reads before it
// closes the connection; a health endpoint that answers more is not read to
// its end.
const drainLimit = 64 << 10

// HTTPCheck is healthy when a GET of URL answers with the expected status.
//
// Every check opens a new connection and closes it after the answer, so a
// server that died behind a kept-alive connection is noticed. Redirects are
// not followed: the first response counts. Environment proxies are ignored:
// a health check is about the server at URL, never about a proxy in between.
// The body is drained (up to 64 KiB) and closed. Errors name the URL, and
// the status when that is what failed.
type HTTPCheck struct {
	URL string
	// ExpectStatus is the status code that means healthy; 0 accepts any 2xx.
	ExpectStatus int
	// InsecureSkipVerify skips TLS certificate verification. Health is about
	// whether the server answers, not who it is: kube-apiserver's /readyz is
	// checked this way because its serving CA is not ours.
	InsecureSkipVerify bool
	// Dial opens the connection; nil dials with package net. Callers set it
	// to choose where the dial happens (a network namespace, a test's fake).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds one check; 0 leaves it to ctx.
	Timeout time.Duration
	// UserAgent names the checker in the server's logs; "" sends Go's
	// default.
	UserAgent string
	// Client replaces the built-in client, for a caller that holds its own
	// roots (a test server's); Dial and InsecureSkipVerify are then
	// ignored. Redirects are still not followed and the request still asks
	// for the connection to be closed.
	Client *http.Client
}

// Do runs the check once and returns nil when healthy. It returns soon
// after ctx ends.
func (c HTTPCheck) Do(ctx context.Context) error {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", c.URL, err)
	}
	where := req.URL.Redacted()
	req.Close = true
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	var client http.Client
	if c.Client != nil {
		client = *c.Client
	} else {
		tr := &http.Transport{
			Proxy:             nil,
			DialContext:       c.Dial,
			DisableKeepAlives: true,
			// #nosec G402 -- opt-in, see the field's comment.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12},
		}
		defer tr.CloseIdleConnections()
		client.Transport = tr
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		// *url.Error repeats the URL in its own words; say it once, ours.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return fmt.Errorf("GET %s: %w", where, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
	switch {
	case c.ExpectStatus != 0 && resp.StatusCode != c.ExpectStatus:
		return fmt.Errorf("GET %s: status %d, want %d", where, resp.StatusCode, c.ExpectStatus)
	case c.ExpectStatus == 0 && (resp.StatusCode < 200 || resp.StatusCode > 299):
		return fmt.Errorf("GET %s: status %d, want 2xx", where, resp.StatusCode)
	}
	return nil
}
