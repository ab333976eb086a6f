package libvirt

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestCountingReader(t *testing.T) {
	src := strings.Repeat("x", 100)
	var seen int64
	c := &countingReader{ctx: context.Background(), r: strings.NewReader(src + "grown"), total: 100, progress: func(d, _ int64) { seen = d }}
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 100 || c.err != nil || seen != 100 {
		t.Fatalf("read %d bytes, err %v/%v, progress %d", len(b), err, c.err, seen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c = &countingReader{ctx: ctx, r: strings.NewReader(src), total: 100}
	buf := make([]byte, 10)
	if n, _ := c.Read(buf); n != 10 {
		t.Fatal(n)
	}
	cancel()
	// A cancelled upload ends the stream (io.EOF) and remembers why.
	if n, err := c.Read(buf); n != 0 || err != io.EOF || !errors.Is(c.err, context.Canceled) {
		t.Fatalf("after cancel: %d %v %v", n, err, c.err)
	}
}
