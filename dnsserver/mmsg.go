package dnsserver

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgBatch is one socket's array of messages for recvmmsg or sendmmsg,
// issued as raw system calls from the runtime poller's callbacks. The
// socket is non-blocking, so the calls never block, and a raw call skips
// the scheduler's system-call bookkeeping: at a node's query rate (a packet
// a millisecond, the process idle in between) an ordinary call woke the
// runtime's monitor thread out of its deep sleep for every packet, which
// tripled the CPU time a query cost (TestBenchDNSProfile with
// BENCH_DNS_RATE=1000; TestBenchDNS's CPU per query at 1,000 q/s compares
// it with CoreDNS and dnsmasq).
type mmsgBatch struct {
	rc    syscall.RawConn
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names [][unix.SizeofSockaddrInet6]byte
	bufs  [][]byte
	oobs  [][]byte

	// The callbacks' arguments and results; bound once so that a call
	// allocates nothing.
	count, got int
	errno      syscall.Errno
	readFn     func(uintptr) bool
	writeFn    func(uintptr) bool
}

// mmsghdr is struct mmsghdr: a msghdr and the length the call moved.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// newMmsgBatch makes n messages with buffers of bufSize bytes and, when
// oobSize is not 0, control buffers of that size.
func newMmsgBatch(rc syscall.RawConn, n, bufSize, oobSize int) *mmsgBatch {
	b := &mmsgBatch{rc: rc, hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n),
		names: make([][unix.SizeofSockaddrInet6]byte, n), bufs: make([][]byte, n), oobs: make([][]byte, n)}
	for i := range n {
		b.bufs[i] = make([]byte, bufSize)
		if oobSize > 0 {
			b.oobs[i] = make([]byte, oobSize)
		}
		h := &b.hdrs[i].hdr
		h.Name = &b.names[i][0]
		h.Iov = &b.iovs[i]
		h.SetIovlen(1)
	}
	b.readFn = b.recvCall
	b.writeFn = b.sendCall
	return b
}

// recv reads what has arrived, waiting in the runtime poller while nothing
// has: at least one message, at most all of the batch's.
func (b *mmsgBatch) recv() (int, error) {
	for i := range b.hdrs {
		h := &b.hdrs[i].hdr
		h.Namelen = unix.SizeofSockaddrInet6
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(len(b.bufs[i]))
		if oob := b.oobs[i]; len(oob) > 0 {
			h.Control = &oob[0]
			h.SetControllen(len(oob))
		}
		h.Flags = 0
	}
	b.count = len(b.hdrs)
	if err := b.rc.Read(b.readFn); err != nil {
		return 0, err
	}
	if b.errno != 0 {
		return 0, b.errno
	}
	return b.got, nil
}

func (b *mmsgBatch) recvCall(fd uintptr) bool { return b.call(unix.SYS_RECVMMSG, fd) }

func (b *mmsgBatch) sendCall(fd uintptr) bool { return b.call(unix.SYS_SENDMMSG, fd) }

// call makes the system call trap on the batch and records its result;
// false asks the poller to wait for the socket and call again (EAGAIN).
func (b *mmsgBatch) call(trap, fd uintptr) bool {
	var n uintptr
	e := unix.EINTR
	for e == unix.EINTR {
		n, _, e = unix.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(b.count), 0, 0, 0)
	}
	runtime.KeepAlive(b)
	switch e {
	case unix.EAGAIN:
		return false
	case 0:
		b.got, b.errno = int(n), 0
	default:
		b.got, b.errno = 0, e
	}
	return true
}

// data is message i's payload as received.
func (b *mmsgBatch) data(i int) []byte { return b.bufs[i][:b.hdrs[i].len] }

// control is message i's control messages as received.
func (b *mmsgBatch) control(i int) []byte {
	return b.oobs[i][:min(int(controllen(&b.hdrs[i].hdr)), len(b.oobs[i]))]
}

// from is the address message i came from; ok is false for an address
// that is not IPv4 or IPv6. An IPv4 client of a dual-stack socket is an
// IPv4-mapped IPv6 address, as the kernel gives it.
func (b *mmsgBatch) from(i int) (netip.AddrPort, bool) {
	name := b.names[i][:min(int(b.hdrs[i].hdr.Namelen), len(b.names[i]))]
	if len(name) < 2 {
		return netip.AddrPort{}, false
	}
	switch binary.NativeEndian.Uint16(name) {
	case unix.AF_INET:
		if len(name) < unix.SizeofSockaddrInet4 {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(name[4:8])), binary.BigEndian.Uint16(name[2:4])), true
	case unix.AF_INET6:
		if len(name) < unix.SizeofSockaddrInet6 {
			return netip.AddrPort{}, false
		}
		a := netip.AddrFrom16([16]byte(name[8:24]))
		if scope := binary.NativeEndian.Uint32(name[24:28]); scope != 0 {
			// A link-local client: the zone as the interface's index,
			// which the net package and the reply's sockaddr both take.
			a = a.WithZone(strconv.FormatUint(uint64(scope), 10))
		}
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(name[2:4])), true
	}
	return netip.AddrPort{}, false
}

// buf is message k's buffer, emptied, to append a reply to.
func (b *mmsgBatch) buf(k int) []byte { return b.bufs[k][:0] }

// oob is message k's control buffer, emptied, to append to.
func (b *mmsgBatch) oob(k int) []byte { return b.oobs[k][:0] }

// set makes message k a reply of payload to the sender of message i of
// in, with control messages oob (nil for none). payload and oob stay the
// batch's until sent.
func (b *mmsgBatch) set(k int, payload []byte, in *mmsgBatch, i int, oob []byte) {
	h := &b.hdrs[k].hdr
	b.names[k] = in.names[i]
	h.Namelen = in.hdrs[i].hdr.Namelen
	b.bufs[k] = payload
	b.iovs[k].Base = unsafe.SliceData(payload)
	b.iovs[k].SetLen(len(payload))
	if oob != nil {
		b.oobs[k] = oob
	}
	h.Control, h.Controllen = nil, 0
	if len(oob) > 0 {
		h.Control = &oob[0]
		h.SetControllen(len(oob))
	}
	h.Flags = 0
}

// send sends messages [from, to) in one call, waiting in the poller while
// the socket's buffer is full; it returns how many the kernel took (at
// least one unless err is not nil).
func (b *mmsgBatch) send(from, to int) (int, error) {
	if to <= from {
		return 0, nil
	}
	// The call reads from the first header given: move the window.
	hdrs := b.hdrs
	b.hdrs = b.hdrs[from:to]
	b.count = to - from
	err := b.rc.Write(b.writeFn)
	b.hdrs = hdrs
	if err != nil {
		return 0, err
	}
	if b.errno != 0 {
		return 0, b.errno
	}
	return b.got, nil
}

// controllen reads msg_controllen, a size_t.
func controllen(h *unix.Msghdr) uint64 { return uint64(h.Controllen) }
