package xdp

import "errors"

// ErrNeedsLinux is every constructor's answer on other systems.
var ErrNeedsLinux = errors.New("xdp: AF_XDP needs Linux")

// AttachMode is how the program attaches to an interface.
type AttachMode int

const (
	// AttachGeneric runs the program on the kernel's socket buffers (SKB mode): any device,
	// veth included, with AF_XDP sockets in copy mode.
	AttachGeneric AttachMode = iota
	// AttachDriver runs it in the driver, before socket buffers exist; the device's driver
	// must support XDP (veth does).
	AttachDriver
	// AttachAuto tries driver mode and falls back to generic mode.
	AttachAuto
)

// BindMode is how a socket's UMEM meets the device.
type BindMode int

const (
	// BindAuto lets the kernel choose: zero-copy where the driver offers it, copy elsewhere.
	BindAuto BindMode = iota
	// BindCopy copies each frame between the device's buffers and the UMEM (any device).
	BindCopy
	// BindZeroCopy has the device DMA straight into the UMEM; binding fails where the driver
	// does not support it.
	BindZeroCopy
)

// SocketConfig sizes and places an AF_XDP socket.
type SocketConfig struct {
	// Ifindex and Queue are the device and its receive queue the socket binds to.
	Ifindex, Queue int
	// Frames is the number of UMEM frames, a power of two (default 4096): half are posted to
	// the fill ring for receiving, half are kept for transmitting. Each ring has Frames/2
	// entries.
	Frames int
	// FrameSize is 2048 or 4096 (default 2048); a frame holds one packet.
	FrameSize int
	// Bind chooses copy or zero-copy mode.
	Bind BindMode
	// NoNeedWakeup turns off XDP_USE_NEED_WAKEUP (then every transmit kicks the kernel).
	NoNeedWakeup bool
	// MultiBuffer binds with XDP_USE_SG (Linux 6.6): a packet longer than a frame arrives in
	// several frames (Frame.More) and Transmit sends one across several. Binding fails with
	// EINVAL on kernels without it (see MultiBuffer on Socket).
	MultiBuffer bool
}

// Frame is one received packet, in place in the UMEM: Data is valid until the frame is given
// back with Release.
type Frame struct {
	Addr uint64 // the frame's UMEM address, as the RX descriptor gave it
	Data []byte
	// More: the packet goes on in the next frame (a multi-buffer socket's packet longer than
	// a frame; XDP_PKT_CONTD). Receive never ends a batch inside a packet that fits it.
	More bool
}

// Stats counts a socket's outcomes: its own (Rx... Wakeups) and the kernel's (from the
// XDP_STATISTICS socket option).
type Stats struct {
	RxFrames, RxBatches uint64
	// FillEmpty counts receive calls that found the fill ring empty: every receive frame was
	// held by the caller, so the kernel had nowhere to put a packet.
	FillEmpty uint64
	// TxFrames counts the frames posted for transmitting (a packet longer than a frame, on a
	// multi-buffer socket, takes several).
	TxFrames uint64
	// TxRingFull counts transmit calls cut short for want of a TX ring slot or a free frame.
	TxRingFull uint64
	// TxTooLong counts packets refused for being longer than a frame.
	TxTooLong   uint64
	Completions uint64
	// Wakeups counts the system calls that kicked the kernel; WakeupBusy those it answered
	// with EAGAIN, EBUSY or ENOBUFS (retried on the next call).
	Wakeups, WakeupBusy uint64

	// The kernel's counters.
	RxDropped, RxInvalidDescs, TxInvalidDescs, RxRingFull, RxFillRingEmptyDescs, TxRingEmptyDescs uint64
}

// ProgramCounters counts what the program did with the frames it matched (summed over CPUs).
type ProgramCounters struct {
	// Redirected frames went to the socket of their receive queue.
	Redirected uint64
	// NoSocket frames matched a port but found no socket registered for their queue and went
	// to the kernel's stack.
	NoSocket uint64
}
