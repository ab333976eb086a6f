package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"appliance/app/provision"
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

// event draws one step of a machine or of the base image.
func (pr *progress) event(e provision.Step) {
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

// applyLines prints apply's events: plain lines for what happened, the
// live lines of the build and of the wait, and the base image's download
// bar on a terminal. Merge warnings go to errOut, everything else to out.
type applyLines struct {
	out, errOut io.Writer
	terminal    bool
	lines       *progress    // the build's or the wait's; nil between them
	bar         *progressBar // the download's, on a terminal
}

func newApplyLines(out, errOut io.Writer) *applyLines {
	return &applyLines{out: out, errOut: errOut, terminal: isTerminal(out)}
}

// event is apply's emit callback.
func (a *applyLines) event(e provision.Event) {
	out := a.out
	switch e := e.(type) {
	case provision.IgnitionWarning:
		fmt.Fprintln(a.errOut, "warning:", e.Text)
	case provision.ServingIgnition:
		fmt.Fprintf(out, "serving the %s Ignition at %s (CA generated for this run, in the VM's pointer config)\n", e.Role, e.URL)
	case provision.PlatformWarning:
		fmt.Fprintln(out, "warning:", e.Text)
	case provision.ImageDownload:
		if !a.terminal {
			return
		}
		if a.bar == nil {
			a.bar = newProgressBar(out, "download")
		}
		a.bar.update(e.Done, e.Total)
	case provision.ImageDownloaded:
		if a.bar != nil {
			a.bar.finish(e.Err == nil)
			a.bar = nil
		}
	case provision.BuildStart:
		a.lines = newProgress(out, e.Machines)
	case provision.MachineStep:
		if a.lines != nil {
			a.lines.event(e.Step)
		}
	case provision.BuildEnd:
		a.closeLines()
		if r := e.Result; r != nil {
			fmt.Fprintf(out, "\n%d created, %d completed, %d already there, %d started in %s.\n",
				len(r.Created), len(r.Completed), len(r.Existing), len(r.Started), r.Elapsed.Round(100e6))
		}
	case provision.ServerStops:
		fmt.Fprintf(out, "warning: the VMs are off, and the Ignition server stops now; their pointers carry this run's CA, so destroy them before the next apply serves again\n")
	case provision.WaitStart:
		fmt.Fprintf(out, "\nwaiting up to %s for every VM to run and report its address:\n", e.Timeout)
		a.lines = newWaitProgress(out, e.Machines)
	case provision.WaitEnd:
		a.closeLines()
	case provision.AllRunning:
		fmt.Fprintf(out, "all %d VMs running with their addresses.\n", e.VMs)
	case provision.AwaitingFetch:
		fmt.Fprintf(out, "serving Ignition until the %s VMs have fetched it (Ctrl-C stops)...\n", provision.JoinRoles(e.Roles))
	case provision.AllFetched:
		fmt.Fprintln(out, "every served Ignition config was fetched.")
	}
}

func (a *applyLines) closeLines() {
	if a.lines != nil {
		a.lines.close()
		a.lines = nil
	}
}

// close finishes whatever is still drawn.
func (a *applyLines) close() {
	a.closeLines()
	if a.bar != nil {
		a.bar.finish(false)
		a.bar = nil
	}
}
