package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"appliance/internal/netlab"
)

// Clients that call a service through a VIP the whole time a test moves
// it, and count what they saw.

// ticking is a loop run by every: stop it with close.
type ticking struct {
	stop chan struct{}
	done chan struct{}
}

// every runs f in a goroutine of its own at once and then every period
// (a call that takes longer delays the next) until f returns false or
// close is called, and closes it when the test ends.
func every(t testing.TB, period time.Duration, f func() bool) *ticking {
	k := &ticking{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for f() {
			select {
			case <-k.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(k.close)
	return k
}

// close stops the loop and waits for a call under way to end.
func (k *ticking) close() {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.done
}

// apiCaller calls GET /version on VIP:6443 from a node, one new connection
// per call (callAPI), and counts who answered, how long the slowest answer
// took, and what failed: calls that could not connect (nobody answered for
// the VIP) apart from calls whose connection was reset once established
// (the VIP moved while the call was in flight) and other failures once
// connected (a timeout, or EOF).
type apiCaller struct {
	*ticking
	mu       sync.Mutex
	ok       int
	by       map[string]int
	slowest  time.Duration
	failures []callFailure
}

// callFailure is one failed call of an apiCaller.
type callFailure struct {
	at        time.Time // when the call began
	connected bool
	err       error
}

// reset reports whether the call's connection was reset once established.
func (f callFailure) reset() bool { return f.connected && errors.Is(f.err, syscall.ECONNRESET) }

func (f callFailure) String() string { return f.at.Format("15:04:05.000") + " " + f.err.Error() }

func startAPICaller(t *testing.T, from *netlab.Node, addr string, period time.Duration) *apiCaller {
	c := &apiCaller{by: map[string]int{}}
	c.ticking = every(t, period, func() bool {
		start := time.Now()
		node, connected, err := callAPI(from, addr)
		took := time.Since(start)
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.failures = append(c.failures, callFailure{at: start, connected: connected, err: err})
			return true
		}
		c.ok++
		c.by[node]++
		c.slowest = max(c.slowest, took)
		return true
	})
	return c
}

// snapshot is what the caller counted so far: calls answered, by the node
// that answered; calls failed (could not connect, or no answer) and broken
// (connected, then reset), each as "time error".
func (c *apiCaller) snapshot() (ok int, by map[string]int, failed, broken []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	by = map[string]int{}
	for k, v := range c.by {
		by[k] = v
	}
	for _, f := range c.failures {
		if f.reset() {
			broken = append(broken, f.String())
		} else {
			failed = append(failed, f.String())
		}
	}
	return c.ok, by, failed, broken
}

// callAPI dials inside the node's namespace, then speaks TLS and HTTP over
// that connection from this goroutine. connected reports whether the TCP
// connection was established.
func callAPI(from *netlab.Node, addr string) (node string, connected bool, err error) {
	raw, err := from.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "", false, err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(3 * time.Second))
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) // a stand-in's throw-away certificate
	if _, err := fmt.Fprintf(conn, "GET /version HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n"); err != nil {
		return "", true, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", true, err
	}
	defer resp.Body.Close()
	var v struct {
		Node string `json:"node"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		return "", true, fmt.Errorf("status %d: %v", resp.StatusCode, err)
	}
	return v.Node, true, nil
}

// keptCaller calls GET /version every period on one kept (keep-alive)
// connection through the VIP, so the connection itself must survive the
// VIP's moves. The first error ends the connection and the calls.
type keptCaller struct {
	*ticking
	conn   net.Conn
	mu     sync.Mutex
	ok     int
	since  int // answered since mark
	marked bool
	lastOK time.Time
	ended  time.Time // when the error that ended it came
	errs   []string
}

func startKeptCaller(t *testing.T, from *netlab.Node, addr string, period time.Duration) *keptCaller {
	t.Helper()
	return dialKept(t, from, addr, period, 3*time.Second)
}

// dialKept is startKeptCaller with each call's timeout given.
func dialKept(t *testing.T, from *netlab.Node, addr string, period, timeout time.Duration) *keptCaller {
	t.Helper()
	raw, err := from.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) // a stand-in's throw-away certificate
	br := bufio.NewReader(conn)
	call := func() error {
		_ = conn.SetDeadline(time.Now().Add(timeout))
		if _, err := fmt.Fprintf(conn, "GET /version HTTP/1.1\r\nHost: api\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	}
	k := &keptCaller{conn: conn}
	k.ticking = every(t, period, func() bool {
		err := call()
		now := time.Now()
		k.mu.Lock()
		defer k.mu.Unlock()
		if err != nil {
			k.ended = now
			k.errs = append(k.errs, now.Format("15:04:05.000")+" "+err.Error())
			conn.Close()
			return false
		}
		k.ok++
		k.lastOK = now
		if k.marked {
			k.since++
		}
		return true
	})
	t.Cleanup(k.close)
	return k
}

// mark starts counting the calls answered from now on.
func (k *keptCaller) mark() {
	k.mu.Lock()
	k.marked = true
	k.mu.Unlock()
}

// close stops the calls and closes the connection.
func (k *keptCaller) close() {
	k.ticking.close()
	_ = k.conn.Close()
}

// firstError is result with only the first error ("" when none).
func (k *keptCaller) firstError() (ok, since int, err string) {
	ok, since, errs := k.result()
	if len(errs) > 0 {
		err = errs[0]
	}
	return ok, since, err
}

func (k *keptCaller) result() (ok, since int, errs []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ok, k.since, append([]string(nil), k.errs...)
}
