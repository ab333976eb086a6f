package netlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// maxOutput bounds what Output returns: the tail of the log.
const maxOutput = 1 << 20

// Process is a command started in a lab namespace and tracked by the lab.
// It leads its own process group.
type Process struct {
	// Cmd is the started command; do not call its Wait (Process.Wait does).
	Cmd *exec.Cmd

	where string // node name or "hub"
	log   string
	done  chan struct{}
	err   error
}

func (l *Lab) start(ctx context.Context, ns, where, name string, args ...string) (*Process, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("netlab: %s: start %s: lab is closed", where, name)
	}
	l.seq++
	logPath := filepath.Join(l.dir, fmt.Sprintf("%s-%03d-%s.log", where, l.seq, safeBase(name)))
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: start %s: %w", where, name, err)
	}
	defer f.Close() // the child has its own copy
	cmd := nsCommand(ctx, ns, name, args...)
	// A file, not a pipe: no copying goroutine, and Wait does not hang on
	// a daemon's children that inherited the descriptor.
	cmd.Stdout = f
	cmd.Stderr = f
	if err := StartCommand(cmd); err != nil {
		return nil, fmt.Errorf("netlab: %s: start %s: %w", where, name, err)
	}
	p := &Process{Cmd: cmd, where: where, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	l.procs = append(l.procs, p)
	return p, nil
}

func safeBase(name string) string {
	b := filepath.Base(name)
	b = strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, b)
	if len(b) > 40 {
		b = b[:40]
	}
	return b
}

// Pid is the process id, which is also its process group id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// LogPath is the file receiving the process's stdout and stderr.
func (p *Process) LogPath() string { return p.log }

// Signal sends sig to the process itself (not its group), e.g. SIGHUP.
func (p *Process) Signal(sig os.Signal) error {
	if p.exited() {
		return os.ErrProcessDone
	}
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("netlab: %s: signal pid %d: %w", p.where, p.Pid(), err)
	}
	return nil
}

// Kill sends SIGKILL to the whole process group.
func (p *Process) Kill() error {
	if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("netlab: %s: kill group %d: %w", p.where, p.Pid(), err)
	}
	return nil
}

// Stop sends SIGTERM to the process group, and SIGKILL if the process has
// not exited after grace; it returns Wait's result.
func (p *Process) Stop(grace time.Duration) error {
	if !p.exited() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = p.Kill()
		}
	}
	return p.Wait()
}

// Wait waits for the process to exit and returns its exit error (as
// exec.Cmd.Wait). It may be called any number of times, from any goroutine.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Output returns what the process wrote to stdout and stderr so far (the
// last MiB of it), or "" once the lab is closed and its log removed.
func (p *Process) Output() string {
	f, err := os.Open(p.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxOutput {
		_, _ = f.Seek(-maxOutput, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Where is the node the process runs in ("n0", ...), or "hub".
func (p *Process) Where() string { return p.where }
