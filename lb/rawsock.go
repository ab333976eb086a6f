package lb

import (
	"net/netip"
	"os"
	"syscall"
	"unsafe"

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
//
// flags adds to SPLICE_F_NONBLOCK: SPLICE_F_MORE holds a socket's last
// segment back for what follows at once (a FIN).
func rawSplice(in, out, n int, flags uintptr) (int, syscall.Errno) {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), unix.SPLICE_F_NONBLOCK|flags)
		if e != unix.EINTR {
			return int(r), e
		}
	}
}

// resetClose closes fd with an RST rather than a FIN.
func resetClose(fd int) {
	lg := unix.Linger{Onoff: 1, Linger: 0}
	_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&lg)), unsafe.Sizeof(lg), 0)
	rawClose(fd)
}

// dialRaw starts a non-blocking connect to ap: errno 0 when it completed
// within the call, EINPROGRESS (the usual answer, even on loopback) when
// the socket's first event will tell.
func dialRaw(ap netip.AddrPort) (int, unix.Errno) {
	var (
		sa     unsafe.Pointer
		salen  uintptr
		family = unix.AF_INET
		sa4    unix.RawSockaddrInet4
		sa6    unix.RawSockaddrInet6
	)
	switch a := ap.Addr(); {
	case a.Is4() || a.Is4In6():
		sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Unmap().As4()}
		putPort(&sa4.Port, ap.Port())
		sa, salen = unsafe.Pointer(&sa4), unix.SizeofSockaddrInet4
	case a.Is6():
		family = unix.AF_INET6
		sa6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
		putPort(&sa6.Port, ap.Port())
		sa, salen = unsafe.Pointer(&sa6), unix.SizeofSockaddrInet6
	default:
		return -1, unix.EDESTADDRREQ
	}
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	fd := int(r)
	one := int32(1)
	// Like the runtime's own sockets: small writes (TLS records) leave at
	// once. Best effort.
	_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, r, unix.IPPROTO_TCP, unix.TCP_NODELAY, uintptr(unsafe.Pointer(&one)), 4, 0)
	for {
		_, _, e = unix.RawSyscall(unix.SYS_CONNECT, r, uintptr(sa), salen)
		if e != unix.EINTR {
			break
		}
	}
	if e != 0 && e != unix.EINPROGRESS {
		rawClose(fd)
		return -1, e
	}
	return fd, e
}

// putPort stores port in network byte order.
func putPort(dst *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(port>>8), byte(port)
}

// rawAccept accepts a connection on the non-blocking listener lfd, the
// socket non-blocking itself. With peer set the kernel writes the client's
// address there, in the same call.
func rawAccept(lfd int, peer *unix.RawSockaddrAny) (int, unix.Errno) {
	if peer == nil {
		r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		return int(r), e
	}
	n := uint32(unix.SizeofSockaddrAny)
	r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(lfd), uintptr(unsafe.Pointer(peer)), uintptr(unsafe.Pointer(&n)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	return int(r), e
}

// sockaddrFamily is the family of the client whose address accept wrote
// into sa: an IPv4-mapped address (an IPv4 client of a dual-stack
// listener) is IPv4. FamilyAny when the address is of neither family.
func sockaddrFamily(sa *unix.RawSockaddrAny) Family {
	switch sa.Addr.Family {
	case unix.AF_INET:
		return FamilyIPv4
	case unix.AF_INET6:
		a := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa)).Addr
		if netip.AddrFrom16(a).Is4In6() {
			return FamilyIPv4
		}
		return FamilyIPv6
	}
	return FamilyAny
}
