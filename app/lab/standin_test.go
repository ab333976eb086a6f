package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestStream: /lab/stream writes "NAME SEQ" lines at its pace, and when
// the stand-in stops (its context ends) the response ends cleanly, as an
// apiserver shutting down ends its watches: the soak counts any other end
// of a stream against a planned move.
func TestStream(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { stream(ctx, w, r, "master-0") }))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/lab/stream?every=20ms")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := body.ReadString('\n')
		if want := fmt.Sprintf("master-0 %d\n", i); err != nil || line != want {
			t.Fatalf("line %d: %q, %v; want %q", i, line, err, want)
		}
	}
	stop()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, body)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the stream ended with %v, want a clean end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream goes on 10 s after the stand-in stopped")
	}
}
