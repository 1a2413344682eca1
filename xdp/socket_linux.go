//go:build linux

package xdp

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one of the four rings shared with the kernel. The application produces on the fill
// and TX rings and consumes on the completion and RX rings; prod or cons is its own index, the
// other pointer's value the kernel's.
type ring struct {
	mem        []byte
	producer   *uint32
	consumer   *uint32
	flags      *uint32
	descs      unsafe.Pointer
	mask, size uint32
	prod, cons uint32 // the application's copy of its own index
}

func (r *ring) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// addr is entry i of a fill or completion ring.
func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

// desc is entry i of an RX or TX ring.
func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// Socket is an AF_XDP socket with its UMEM and rings. It has one owner: its methods are not
// safe for concurrent use.
type Socket struct {
	fd         int
	umem       []byte
	frameSize  uint64
	fill, comp ring
	rx, tx     ring
	txFree     []uint64 // frames free for transmitting (a stack)
	bind       string
	needWakeup bool
	sg         bool // bound with XDP_USE_SG
	pfd        [1]unix.PollFd
	st         Stats
}

// NewSocket creates the socket, its UMEM and rings, and binds it to (Ifindex, Queue) in the
// calling thread's network namespace. With BindAuto the kernel takes zero-copy where the driver
// offers it, copy mode elsewhere; BindMode says which. XDP_USE_NEED_WAKEUP is asked for unless
// NoNeedWakeup, and given up where the kernel refuses it.
func NewSocket(cfg SocketConfig) (*Socket, error) {
	if cfg.Frames == 0 {
		cfg.Frames = 4096
	}
	if cfg.FrameSize == 0 {
		cfg.FrameSize = 2048
	}
	if cfg.Frames < 2 || cfg.Frames&(cfg.Frames-1) != 0 {
		return nil, fmt.Errorf("xdp: %d frames, want a power of two", cfg.Frames)
	}
	if cfg.FrameSize != 2048 && cfg.FrameSize != 4096 {
		return nil, fmt.Errorf("xdp: frame size %d, want 2048 or 4096", cfg.FrameSize)
	}
	s, err := newSocket(cfg, !cfg.NoNeedWakeup)
	if err != nil && !cfg.NoNeedWakeup && errors.Is(err, unix.EINVAL) {
		s, err = newSocket(cfg, false) // a kernel before 5.4
	}
	return s, err
}

func newSocket(cfg SocketConfig, needWakeup bool) (_ *Socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xdp: AF_XDP socket: %w", err)
	}
	s := &Socket{fd: fd, frameSize: uint64(cfg.FrameSize), needWakeup: needWakeup}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.umem, err = unix.Mmap(-1, 0, cfg.Frames*cfg.FrameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xdp: UMEM of %d frames: %w", cfg.Frames, err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)),
		Size: uint32(cfg.FrameSize)}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("xdp: registering the UMEM: %w", err)
	}
	n := cfg.Frames / 2
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, n); err != nil {
			return nil, fmt.Errorf("xdp: ring %d of %d entries: %w", opt, n, err)
		}
	}
	var off unix.XDPMmapOffsets
	if l, err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("xdp: ring offsets: %w", err)
	} else if l != unsafe.Sizeof(off) {
		return nil, fmt.Errorf("xdp: ring offsets of %d octets: the kernel predates 5.4", l)
	}
	for _, r := range []struct {
		r     *ring
		off   unix.XDPRingOffset
		pgoff int64
		esize uintptr
	}{
		{&s.fill, off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, 8},
		{&s.comp, off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, 8},
		{&s.rx, off.Rx, unix.XDP_PGOFF_RX_RING, unsafe.Sizeof(unix.XDPDesc{})},
		{&s.tx, off.Tx, unix.XDP_PGOFF_TX_RING, unsafe.Sizeof(unix.XDPDesc{})},
	} {
		if err := r.r.mmap(fd, r.off, r.pgoff, uint32(n), r.esize); err != nil {
			return nil, err
		}
	}
	// In copy mode the kernel sends at most 32 frames a kick unless told more (Linux 6.17,
	// XDP_MAX_TX_SKB_BUDGET): a whole ring's worth, so that one kick sends a batch. Older
	// kernels refuse the option and Flush kicks again.
	_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, n)
	// Half the frames to the fill ring, half for transmitting.
	for i := 0; i < n; i++ {
		*s.fill.addr(s.fill.prod) = uint64(i) * s.frameSize
		s.fill.prod++
	}
	atomic.StoreUint32(s.fill.producer, s.fill.prod)
	s.txFree = make([]uint64, 0, n)
	for i := cfg.Frames - 1; i >= n; i-- {
		s.txFree = append(s.txFree, uint64(i)*s.frameSize)
	}

	var flags uint16
	switch cfg.Bind {
	case BindCopy:
		flags = unix.XDP_COPY
	case BindZeroCopy:
		flags = unix.XDP_ZEROCOPY
	}
	if needWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	if cfg.MultiBuffer {
		flags |= unix.XDP_USE_SG
		s.sg = true
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(cfg.Ifindex), QueueID: uint32(cfg.Queue)}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, fmt.Errorf("xdp: binding to interface %d queue %d (flags %#x): %w", cfg.Ifindex, cfg.Queue, flags, err)
	}
	var opts uint32
	if _, err := getsockopt(fd, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err == nil && opts&unix.XDP_OPTIONS_ZEROCOPY != 0 {
		s.bind = "zerocopy"
	} else {
		s.bind = "copy"
	}
	s.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	return s, nil
}

func (r *ring) mmap(fd int, off unix.XDPRingOffset, pgoff int64, n uint32, esize uintptr) error {
	mem, err := unix.Mmap(fd, pgoff, int(off.Desc)+int(n)*int(esize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("xdp: mapping the ring at %#x: %w", pgoff, err)
	}
	base := unsafe.Pointer(&mem[0])
	*r = ring{mem: mem, mask: n - 1, size: n,
		producer: (*uint32)(unsafe.Add(base, off.Producer)),
		consumer: (*uint32)(unsafe.Add(base, off.Consumer)),
		flags:    (*uint32)(unsafe.Add(base, off.Flags)),
		descs:    unsafe.Add(base, off.Desc)}
	r.prod = atomic.LoadUint32(r.producer)
	r.cons = atomic.LoadUint32(r.consumer)
	return nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, l uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), l, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, l uintptr) (uintptr, error) {
	n := uint32(l)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return 0, e
	}
	return uintptr(n), nil
}

// FD is the socket's descriptor (for poll loops of the caller's own).
func (s *Socket) FD() int { return s.fd }

// BindMode is "zerocopy" or "copy", as the kernel bound the socket.
func (s *Socket) BindMode() string { return s.bind }

// NeedWakeup reports whether the socket runs with XDP_USE_NEED_WAKEUP.
func (s *Socket) NeedWakeup() bool { return s.needWakeup }

// FrameSize is the size of a UMEM frame, the longest packet Transmit takes.
func (s *Socket) FrameSize() int { return int(s.frameSize) }

// MultiBuffer reports whether the socket is bound with XDP_USE_SG: packets longer than a frame
// arrive, and leave, in several.
func (s *Socket) MultiBuffer() bool { return s.sg }

// Receive takes up to len(frames) received packets off the RX ring into frames and returns
// how many. The packets stay in place in the UMEM, owned by the caller until Release. It does
// not block (Wait does).
func (s *Socket) Receive(frames []Frame) int {
	avail := atomic.LoadUint32(s.rx.producer) - s.rx.cons
	n := uint32(len(frames))
	if avail < n {
		n = avail
	}
	if atomic.LoadUint32(s.fill.consumer) == s.fill.prod {
		s.st.FillEmpty++
	}
	if n == 0 {
		if s.needWakeup && s.fill.needWakeup() {
			s.kick(unix.SYS_RECVFROM)
		}
		return 0
	}
	end := uint32(0) // the frames up to the end of the last whole packet
	for i := uint32(0); i < n; i++ {
		d := s.rx.desc(s.rx.cons + i)
		more := d.Options&unix.XDP_PKT_CONTD != 0
		frames[i] = Frame{Addr: d.Addr, Data: s.umem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)], More: more}
		if !more {
			end = i + 1
		}
	}
	// The kernel posts a packet's frames together: a batch ends inside one only where frames
	// is too short for the rest; leave those for the next call, unless the packet alone
	// outgrows frames.
	if end > 0 {
		n = end
	}
	s.rx.cons += n
	atomic.StoreUint32(s.rx.consumer, s.rx.cons)
	s.st.RxFrames += uint64(n)
	s.st.RxBatches++
	return int(n)
}

// Release gives received frames back to the kernel (the fill ring). Each frame must come from
// Receive and be released once.
func (s *Socket) Release(frames []Frame) {
	for i := range frames {
		*s.fill.addr(s.fill.prod) = frames[i].Addr &^ (s.frameSize - 1)
		s.fill.prod++
		frames[i] = Frame{}
	}
	atomic.StoreUint32(s.fill.producer, s.fill.prod)
}

// ReleaseAddr gives one received frame back to the kernel (the fill ring), by the Addr Receive
// gave it: for a caller that hands frames on one by one and gives each back when it is done
// with it. Each frame must be released once, by Release or ReleaseAddr.
func (s *Socket) ReleaseAddr(addr uint64) {
	*s.fill.addr(s.fill.prod) = addr &^ (s.frameSize - 1)
	s.fill.prod++
	atomic.StoreUint32(s.fill.producer, s.fill.prod)
}

// ErrFrameTooLong is Transmit's answer to a packet longer than a UMEM frame (on a multi-buffer
// socket: longer than maxMultiBuffer).
var ErrFrameTooLong = errors.New("xdp: packet longer than a UMEM frame")

// maxMultiBuffer is the longest packet a multi-buffer socket transmits: the kernel takes at
// most MAX_SKB_FRAGS (17) frames a packet in copy mode; 16 KiB in frames of 2 KiB stays well
// within that, and within a jumbo frame.
const maxMultiBuffer = 16 << 10

// Transmit copies packets (whole Ethernet frames) into free UMEM frames, posts them on the TX
// ring and kicks the kernel when it needs it. It returns how many it posted: fewer than
// len(pkts) when the ring or the free frames run out (retry after completions), with
// ErrFrameTooLong when the packet after them is too long. A packet longer than a frame goes in
// several frames on a multi-buffer socket (each counted in Stats.TxFrames), and is refused on
// another. It first reclaims completed frames.
func (s *Socket) Transmit(pkts [][]byte) (int, error) { return s.TransmitJoined(nil, pkts) }

// TransmitJoined is Transmit of packets given in two parts, heads[i] then bodies[i] (an
// Ethernet header and an IP packet, say), joined as they are copied into their frames: the
// caller needs no copy of its own to put a header before a packet. heads nil: bodies alone.
func (s *Socket) TransmitJoined(heads, bodies [][]byte) (int, error) {
	s.Reclaim()
	free := s.tx.size - (s.tx.prod - atomic.LoadUint32(s.tx.consumer))
	var err error
	n, posted := 0, uint32(0)
	for i, p := range bodies {
		var h []byte
		if heads != nil {
			h = heads[i]
		}
		l := len(h) + len(p)
		parts := uint32(1)
		if l > int(s.frameSize) {
			if !s.sg || l > maxMultiBuffer {
				s.st.TxTooLong++
				err = ErrFrameTooLong
				break
			}
			parts = uint32((uint64(l) + s.frameSize - 1) / s.frameSize)
		}
		if free < parts || uint32(len(s.txFree)) < parts {
			s.st.TxRingFull++
			break
		}
		// The packet, joined from h and p, in frames of frameSize octets; all but the last
		// say that it goes on (XDP_PKT_CONTD).
		for k := uint32(0); k < parts; k++ {
			addr := s.txFree[len(s.txFree)-1]
			s.txFree = s.txFree[:len(s.txFree)-1]
			frame := s.umem[addr : addr+s.frameSize]
			m := copy(frame, h)
			h = h[m:]
			c := copy(frame[m:], p)
			p = p[c:]
			d := unix.XDPDesc{Addr: addr, Len: uint32(m + c)}
			if k+1 < parts {
				d.Options = unix.XDP_PKT_CONTD
			}
			*s.tx.desc(s.tx.prod) = d
			s.tx.prod++
		}
		free -= parts
		posted += parts
		n++
	}
	if n > 0 {
		atomic.StoreUint32(s.tx.producer, s.tx.prod)
		s.st.TxFrames += uint64(posted)
	}
	// Kick even when nothing new was posted: a full ring whose last kick found the kernel busy
	// would otherwise wait for a kick that never comes.
	if kerr := s.Flush(); kerr != nil {
		return n, kerr
	}
	return n, err
}

// Flush kicks the kernel to send what the TX ring holds, when it needs a kick. In copy mode the
// kernel sends a bounded number of frames per kick, so Flush kicks until the ring is empty or
// the kernel reports itself busy.
func (s *Socket) Flush() error {
	for i := 0; i < 64; i++ {
		if atomic.LoadUint32(s.tx.consumer) == s.tx.prod {
			return nil
		}
		if s.needWakeup && !s.tx.needWakeup() {
			return nil
		}
		busy, err := s.kick(unix.SYS_SENDTO)
		if err != nil || busy || s.bind == "zerocopy" {
			return err
		}
	}
	return nil
}

// kick is sendto or recvfrom with no data: the kernel's wakeup. EAGAIN, EBUSY and ENOBUFS say
// the kernel is busy (busy true); ENETDOWN and the like are errors.
//
// It never blocks (MSG_DONTWAIT), so it is a raw system call, which Go's scheduler does not
// see: in copy mode a kick is where the kernel sends the frames (on veth the peer's receive
// runs inside it too), long enough that the scheduler would hand the caller's P to another
// thread during most kicks, a wakeup and a context switch each.
func (s *Socket) kick(trap uintptr) (busy bool, err error) {
	s.st.Wakeups++
	_, _, e := unix.RawSyscall6(trap, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0:
		return false, nil
	case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
		s.st.WakeupBusy++
		return true, nil
	}
	return false, fmt.Errorf("xdp: waking the kernel: %w", e)
}

// Reclaim takes completed transmissions off the completion ring, freeing their frames, and
// returns how many.
func (s *Socket) Reclaim() int {
	n := atomic.LoadUint32(s.comp.producer) - s.comp.cons
	for i := uint32(0); i < n; i++ {
		s.txFree = append(s.txFree, *s.comp.addr(s.comp.cons + i)&^(s.frameSize-1))
	}
	s.comp.cons += n
	atomic.StoreUint32(s.comp.consumer, s.comp.cons)
	s.st.Completions += uint64(n)
	return int(n)
}

// TxPending is the number of frames posted for transmission and not yet completed.
func (s *Socket) TxPending() int { return cap(s.txFree) - len(s.txFree) }

// Wait blocks until the RX ring holds a packet or timeout passes; it reports whether a packet
// is there.
func (s *Socket) Wait(timeout time.Duration) (bool, error) {
	if atomic.LoadUint32(s.rx.producer) != s.rx.cons {
		return true, nil
	}
	ms := int(timeout / time.Millisecond)
	for {
		n, err := unix.Poll(s.pfd[:], ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("xdp: poll: %w", err)
		}
		return n > 0 && atomic.LoadUint32(s.rx.producer) != s.rx.cons, nil
	}
}

// Stats returns the socket's counters with the kernel's (XDP_STATISTICS).
func (s *Socket) Stats() (Stats, error) {
	st := s.st
	var k unix.XDPStatistics
	if _, err := getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&k), unsafe.Sizeof(k)); err != nil {
		return st, fmt.Errorf("xdp: kernel statistics: %w", err)
	}
	st.RxDropped, st.RxInvalidDescs, st.TxInvalidDescs = k.Rx_dropped, k.Rx_invalid_descs, k.Tx_invalid_descs
	st.RxRingFull, st.RxFillRingEmptyDescs, st.TxRingEmptyDescs = k.Rx_ring_full, k.Rx_fill_ring_empty_descs, k.Tx_ring_empty_descs
	return st, nil
}

// Close closes the socket and unmaps its rings and UMEM.
func (s *Socket) Close() error {
	var errs []error
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		if r.mem != nil {
			if err := unix.Munmap(r.mem); err != nil {
				errs = append(errs, err)
			}
			r.mem = nil
		}
	}
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil {
			errs = append(errs, err)
		}
		s.fd = -1
	}
	if s.umem != nil {
		if err := unix.Munmap(s.umem); err != nil {
			errs = append(errs, err)
		}
		s.umem = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xdp: closing: %w", err)
	}
	return nil
}
