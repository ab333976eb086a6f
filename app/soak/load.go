package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"appliance/internal/netlab"
)

// call is one API call through the VIP on a connection of its own.
type call struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Node  string    `json:"node,omitempty"` // who answered; "" when it failed
	Err   string    `json:"err,omitempty"`
	// Stage is where it failed: connect, tls, request, response.
	Stage string `json:"stage,omitempty"`
	Reset bool   `json:"reset,omitempty"` // the failure was a TCP reset
}

func (c call) ok() bool { return c.Node != "" }

// stream is one long-lived request through the VIP, as a watch is: the
// stand-in apiserver writes a line every streamEvery until the connection
// ends.
type stream struct {
	ID     int       `json:"id"`
	Opened time.Time `json:"opened"`
	Ended  time.Time `json:"ended"`
	Node   string    `json:"node,omitempty"` // the apiserver that served it
	Lines  int       `json:"lines"`
	// End is how it ended: "eof" (closed cleanly: a drain, a backend
	// leaving), "reset", "stall" (no line for streamStall: the soak closed
	// it), "error" (anything else, e.g. failing to open), "open" (still
	// running when the soak ended).
	End string `json:"end"`
	Err string `json:"err,omitempty"`
	// MaxGap is the longest time between two lines.
	MaxGap time.Duration `json:"max_gap"`
}

const (
	streamEvery = 200 * time.Millisecond
	// streamStall is how long a stream may stay silent before the soak
	// counts it broken: a move with its handback keeps the lines coming
	// within a second.
	streamStall = 5 * time.Second
	// callTimeout bounds one call: long enough for the LB's connect retry
	// to another backend (2 s), short enough to see an outage.
	callTimeout = 5 * time.Second
)

// apiLoad calls the API through the VIP from the client: a new connection
// every Options.CallEvery, and Options.Streams long-lived streams.
type apiLoad struct {
	ctx    context.Context
	from   *netlab.Node
	every  time.Duration
	rec    *recorder
	wg     sync.WaitGroup
	inflow chan struct{}
}

func (a *apiLoad) run(streams int) {
	a.inflow = make(chan struct{}, 64)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(a.every)
		defer t.Stop()
		for {
			select {
			case <-a.ctx.Done():
				return
			case <-t.C:
			}
			select {
			case a.inflow <- struct{}{}:
			default:
				continue // 64 calls hang already: the outage is seen
			}
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				defer func() { <-a.inflow }()
				a.rec.addCall(a.call())
			}()
		}
	}()
	for i := range streams {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for a.ctx.Err() == nil {
				s := a.stream(i + 1)
				a.rec.addStream(s)
				select {
				case <-a.ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
}

func (a *apiLoad) wait() { a.wg.Wait() }

var vipAPI = netip.AddrPortFrom(apiVIP, 6443).String()

// call makes one GET /version through the VIP on a new connection.
func (a *apiLoad) call() call {
	cl := call{Start: time.Now()}
	defer func() { cl.End = time.Now() }()
	fail := func(stage string, err error) call {
		cl.Stage, cl.Err, cl.Reset = stage, err.Error(), errors.Is(err, syscall.ECONNRESET)
		cl.End = time.Now()
		return cl
	}
	raw, err := a.from.DialTimeout("tcp", vipAPI, callTimeout)
	if err != nil {
		return fail("connect", err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(cl.Start.Add(callTimeout))
	c := tlsClient(raw)
	if err := c.Handshake(); err != nil {
		return fail("tls", err)
	}
	if _, err := io.WriteString(c, "GET /version HTTP/1.1\r\nHost: api."+Domain+"\r\nConnection: close\r\n\r\n"); err != nil {
		return fail("request", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return fail("response", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return fail("response", err)
	}
	var v struct {
		Node string `json:"node"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil || v.Node == "" {
		return fail("response", fmt.Errorf("status %d: %.80s", resp.StatusCode, strings.TrimSpace(string(b))))
	}
	cl.Node = v.Node
	return cl
}

// stream opens one stream through the VIP and reads it to its end.
func (a *apiLoad) stream(id int) stream {
	s := stream{ID: id, Opened: time.Now()}
	end := func(kind string, err error) stream {
		s.End, s.Ended = kind, time.Now()
		if err != nil {
			s.Err = err.Error()
		}
		return s
	}
	raw, err := a.from.DialTimeout("tcp", vipAPI, callTimeout)
	if err != nil {
		return end("error", err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(callTimeout))
	c := tlsClient(raw)
	if err := c.Handshake(); err != nil {
		return end(classify(err), err)
	}
	if _, err := fmt.Fprintf(c, "GET /lab/stream?every=%s HTTP/1.1\r\nHost: api.%s\r\n\r\n", streamEvery, Domain); err != nil {
		return end(classify(err), err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return end(classify(err), err)
	}
	if resp.StatusCode != http.StatusOK {
		return end("error", fmt.Errorf("status %d", resp.StatusCode))
	}
	body := bufio.NewReader(resp.Body)
	last := time.Now()
	for {
		_ = raw.SetReadDeadline(time.Now().Add(streamStall))
		line, err := body.ReadString('\n')
		now := time.Now()
		if err != nil {
			if gap := now.Sub(last); gap > s.MaxGap && !errors.Is(err, os.ErrDeadlineExceeded) {
				s.MaxGap = gap
			}
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				s.MaxGap = max(s.MaxGap, streamStall)
				return end("stall", err)
			case a.ctx.Err() != nil:
				return end("open", nil)
			}
			return end(classify(err), err)
		}
		if gap := now.Sub(last); gap > s.MaxGap && s.Lines > 0 {
			s.MaxGap = gap
		}
		last = now
		s.Lines++
		if s.Node == "" {
			if f := strings.Fields(line); len(f) > 0 {
				s.Node = f[0]
			}
		}
		if a.ctx.Err() != nil {
			return end("open", nil)
		}
	}
}

// classify names how a connection ended.
func classify(err error) string {
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "stall"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "stall"
	}
	return "error"
}
