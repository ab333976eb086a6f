package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"appliance/platform"
)

// isTerminal reports whether w is a character device (a person is watching).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress renders apply's events: one live line per machine (and one for the
// image upload) on a terminal, plain time-stamped lines otherwise, so a log
// file or CI output still shows every step.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	// live rendering; nil when writing plain lines
	p     *mpb.Progress
	bars  map[string]*mpb.Bar
	stage map[string]string
	last  map[string]string // plain mode: last stage printed per machine
}

const imageLine = "base image"

func newProgress(w io.Writer, machines []string) *progress { return newLines(w, machines, true) }

// newWaitProgress renders apply --wait: one line per machine, no image.
func newWaitProgress(w io.Writer, machines []string) *progress { return newLines(w, machines, false) }

func newLines(w io.Writer, machines []string, withImage bool) *progress {
	pr := &progress{w: w, start: time.Now(), stage: map[string]string{}, last: map[string]string{}}
	if !isTerminal(w) {
		return pr
	}
	pr.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
	pr.bars = map[string]*mpb.Bar{}
	width := len(imageLine)
	for _, m := range machines {
		width = max(width, len(m))
	}
	add := func(name string, total int64, filler mpb.BarFillerBuilder, extra ...decor.Decorator) {
		pr.stage[name] = "waiting"
		decs := append([]decor.Decorator{decor.Any(func(decor.Statistics) string {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			return pr.stage[name]
		}, decor.WCSyncSpaceR)}, extra...)
		pr.bars[name] = pr.p.New(total, filler,
			mpb.PrependDecorators(decor.Name(name, decor.WC{W: width + 1, C: decor.DindentRight})),
			mpb.AppendDecorators(decs...))
	}
	if withImage {
		add(imageLine, 0, mpb.BarStyle(), decor.CountersKibiByte(" % .1f / % .1f"))
	}
	for _, m := range machines {
		add(m, 1, mpb.NopStyle(), decor.Elapsed(decor.ET_STYLE_GO))
	}
	return pr
}

// event is the platform.ApplyOptions.Progress callback.
func (pr *progress) event(e platform.Event) {
	name := e.Machine
	if name == "" {
		name = imageLine
	}
	stage := e.Stage
	if e.Err != nil {
		stage = "FAILED: " + e.Err.Error()
	}
	if pr.p == nil {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if e.Total > 0 && e.Done < e.Total && pr.last[name] == stage {
			return // byte counts only in live mode
		}
		if pr.last[name] == stage && !e.Finished {
			return
		}
		pr.last[name] = stage
		fmt.Fprintf(pr.w, "%6.1fs  %-28s %s\n", time.Since(pr.start).Seconds(), name, stage)
		return
	}
	pr.mu.Lock()
	pr.stage[name] = stage
	pr.mu.Unlock()
	b := pr.bars[name]
	if b == nil {
		return
	}
	if e.Total > 0 {
		b.SetTotal(e.Total, false)
		b.SetCurrent(e.Done)
	}
	if e.Finished {
		if e.Err != nil {
			b.Abort(false)
		} else {
			b.SetTotal(-1, true)
		}
	}
}

// close finishes the live lines.
func (pr *progress) close() {
	if pr.p == nil {
		return
	}
	for _, b := range pr.bars {
		if !b.Completed() && !b.Aborted() {
			b.Abort(false)
		}
	}
	pr.p.Wait()
}
