package lb

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxSplice is how much one splice call asks to move, and the pipes' size:
// large transfers then take few calls.
const maxSplice = 1 << 20

// maxFreePipes bounds the empty pipes a loop keeps for reuse; the rest are
// closed.
const maxFreePipes = 64

// kpipe is a kernel pipe that carries one direction's bytes between two
// sockets; data counts the bytes in it, slots is its capacity in buffers.
type kpipe struct {
	r, w  int
	data  int
	slots int
}

func newPipe() (*kpipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	// Best effort: a smaller pipe (the user's pipe quota may refuse a
	// larger one) only means more calls.
	size, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, maxSplice)
	if err != nil {
		size, err = unix.FcntlInt(uintptr(fds[0]), unix.F_GETPIPE_SZ, 0)
	}
	slots := 1 // unknown: claim the least, so no read counts as draining
	if err == nil {
		slots = size / os.Getpagesize()
	}
	return &kpipe{r: fds[0], w: fds[1], slots: slots}, nil
}

func (p *kpipe) close() {
	rawClose(p.r)
	rawClose(p.w)
}

// rawClose closes fd with a raw call: closing a non-blocking socket never
// blocks (an RST close neither), but sending its FIN can outlast the
// scheduler monitor's tick, see rawSplice.
func rawClose(fd int) {
	_, _, _ = unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// rawSplice is splice(2) between in and out, non-blocking, retried on
// EINTR. It is a raw call, like every per-connection call of the proxy: it
// never blocks, and announcing it to the scheduler would hand the
// processor to another thread whenever the call (which does the peer
// socket's receive work inline) outlasts the scheduler monitor's 20 µs
// tick; calls in that state also keep the monitor itself waking every
// 20 µs.
func rawSplice(in, out, n int) (int, syscall.Errno) {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), unix.SPLICE_F_NONBLOCK)
		if e != unix.EINTR {
			return int(r), e
		}
	}
}
