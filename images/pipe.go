package images

import (
	"io"
	"sync"
	"sync/atomic"
)

// The fetch pipeline runs in three stages so that two cores share it:
// reading the network (plus the partial-file write and the compressed
// hash), decompressing, and writing the image (plus the uncompressed
// hash). Buffers circulate between the stages; none is allocated per
// chunk.

// readAhead reads r in its own goroutine, up to n chunks ahead.
type readAhead struct {
	ch   chan []byte
	free chan []byte
	done chan struct{}
	stop sync.Once
	wg   sync.WaitGroup
	err  error // the producer's final error; read after ch is closed

	held []byte // the buffer cur points into, returned to free when spent
	cur  []byte
}

func newReadAhead(r io.Reader, n, size int) *readAhead {
	ra := &readAhead{ch: make(chan []byte, n), free: make(chan []byte, n), done: make(chan struct{})}
	for range n {
		ra.free <- make([]byte, size)
	}
	ra.wg.Add(1)
	go func() {
		defer ra.wg.Done()
		defer close(ra.ch)
		for {
			var buf []byte
			select {
			case buf = <-ra.free:
			case <-ra.done:
				return
			}
			// One read per buffer: a chunk moves on as soon as it arrives,
			// so bad data is seen before the rest of the body.
			k, err := r.Read(buf)
			if k > 0 {
				select {
				case ra.ch <- buf[:k]:
				case <-ra.done:
					return
				}
			}
			if err != nil {
				ra.err = err
				return
			}
			if k == 0 {
				ra.free <- buf
			}
		}
	}()
	return ra
}

func (ra *readAhead) Read(p []byte) (int, error) {
	if len(ra.cur) == 0 {
		if ra.held != nil {
			ra.free <- ra.held[:cap(ra.held)]
			ra.held = nil
		}
		buf, ok := <-ra.ch
		if !ok {
			return 0, ra.err
		}
		ra.held, ra.cur = buf, buf
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	return n, nil
}

// Close stops the producer and waits for it; a producer blocked in r.Read
// returns only when r does (the caller closes the response body first).
func (ra *readAhead) Close() {
	ra.stop.Do(func() { close(ra.done) })
	ra.wg.Wait()
}

// writeBehind writes to w in its own goroutine, through n buffers.
type writeBehind struct {
	ch     chan []byte
	free   chan []byte
	errc   chan error
	failed atomic.Bool
	cur    []byte
}

func newWriteBehind(w io.Writer, n, size int) *writeBehind {
	wb := &writeBehind{ch: make(chan []byte, n), free: make(chan []byte, n), errc: make(chan error, 1)}
	for range n {
		wb.free <- make([]byte, 0, size)
	}
	go func() {
		var err error
		for buf := range wb.ch {
			if err == nil {
				if _, err = w.Write(buf); err != nil {
					wb.failed.Store(true)
				}
			}
			wb.free <- buf[:0]
		}
		wb.errc <- err
	}()
	return wb
}

func (wb *writeBehind) Write(p []byte) (int, error) {
	if wb.failed.Load() {
		return 0, io.ErrShortWrite // Close reports the cause
	}
	n := len(p)
	for len(p) > 0 {
		if wb.cur == nil {
			wb.cur = <-wb.free
		}
		k := copy(wb.cur[len(wb.cur):cap(wb.cur)], p)
		wb.cur = wb.cur[:len(wb.cur)+k]
		p = p[k:]
		if len(wb.cur) == cap(wb.cur) {
			wb.ch <- wb.cur
			wb.cur = nil
		}
	}
	return n, nil
}

// Close flushes, waits for the writer and returns its first error.
func (wb *writeBehind) Close() error {
	if len(wb.cur) > 0 {
		wb.ch <- wb.cur
		wb.cur = nil
	}
	close(wb.ch)
	return <-wb.errc
}
