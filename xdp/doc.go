// Package xdp is an AF_XDP data path for the gateway: an XDP program that takes the RoCEv2
// (UDP 4791) and CREM datagrams off a device's receive queue into an AF_XDP socket, and the
// socket, whose frames the caller reads and writes in place in shared memory (the UMEM), in
// batches, without a system call per packet and without allocating.
//
// # What it does
//
// The program (written with cilium/ebpf's assembler, so there is no object file to build or
// ship) reads each frame with bounds checks: Ethernet II, then IPv4 (any header length; not a
// fragment) or IPv6 (next header UDP: a frame with extension headers goes to the kernel), then
// UDP. A frame whose UDP destination port is one of those given to LoadProgram (at most
// MaxPorts: 4791 and the CREM port) is redirected into the XSKMAP entry of the frame's receive
// queue; everything else, VLAN-tagged frames, ARP, ICMP and frames cut short included, goes to
// the kernel's stack (XDP_PASS). Where no socket is registered for the queue, matching frames
// pass too (bpf_redirect_map with XDP_PASS as its fallback, Linux 5.3 and later), and the
// program counts them (Counters: Redirected, NoSocket).
//
// A Socket owns a UMEM of SocketConfig.Frames frames of 2048 or 4096 octets (anonymous memory,
// mapped once): half wait on the fill ring for the kernel to receive into, half are kept for
// transmitting. Receive hands the caller a batch of received frames as slices into the UMEM;
// the caller reads (or rewrites) them in place and gives them back with Release, or one by one
// and in any order with ReleaseAddr (a caller that hands frames on and gets them back later).
// Transmit
// copies whole Ethernet frames (TransmitJoined: a header and a packet given apart, joined as
// they are copied) into free transmit frames, posts them on the TX ring and kicks
// the kernel when it asks to be kicked (XDP_USE_NEED_WAKEUP; in copy mode one kick sends the
// whole ring on Linux 6.17 and later, XDP_MAX_TX_SKB_BUDGET, 32 frames before); frames come back through the
// completion ring (Reclaim, also done by Transmit). Stats counts each outcome: frames received
// and sent, receive calls that found the fill ring empty, transmit calls cut short by a full
// ring, completions, wakeups, and the kernel's own XDP_STATISTICS (frames dropped, invalid
// descriptors, a full RX ring, an empty fill ring).
//
// # What it needs
//
// Linux 5.4 or later (AF_XDP with need-wakeup and ring flags; 5.9 for bpf_link attachment,
// which cilium/ebpf uses), and root or CAP_NET_ADMIN with CAP_BPF and CAP_NET_RAW (CAP_SYS_ADMIN
// before 5.8). A locked-memory limit large enough for the UMEM on kernels before 5.11 (call
// rlimit.RemoveMemlock of cilium/ebpf). On other systems every constructor returns
// ErrNeedsLinux.
//
// # Modes
//
// Attach takes AttachGeneric (the kernel's socket buffers: any device, copy mode only),
// AttachDriver (the driver's own XDP; veth has it), or AttachAuto (driver, else generic);
// AttachMode says which held. NewSocket binds with BindAuto (the kernel takes zero-copy where
// the driver offers it and copy mode elsewhere), BindCopy or BindZeroCopy; BindMode says which.
// On veth, and on any device without AF_XDP zero-copy, the socket runs in copy mode: one copy
// per frame each way, still without a system call per frame on receive.
//
// # Use
//
//	p, err := xdp.LoadProgram(4791, cremPort)
//	err = p.Attach(ifindex, xdp.AttachAuto)
//	s, err := xdp.NewSocket(xdp.SocketConfig{Ifindex: ifindex, Queue: 0})
//	err = p.Register(0, s) // one socket per receive queue
//	frames := make([]xdp.Frame, 64)
//	for {
//		s.Wait(timeout)
//		n := s.Receive(frames)
//		... frames[i].Data, in place ...
//		s.Release(frames[:n])
//		s.Transmit(out)
//	}
//
// A socket binds to one queue: a device with several receive queues needs a socket on each
// (or its traffic steered to one queue, with ethtool's flow rules), or the frames of other
// queues pass to the kernel.
//
// # Falling back, and turning it off
//
// Unregister sends a queue's frames back to the kernel's stack at once (the program passes what
// has no socket), and Program.Close detaches the program: from then on every frame takes the
// ordinary path, to the UDP sockets the caller keeps open for exactly this. Where the program
// does not load or attach (an old kernel, no capability, a driver that refuses), the caller
// stays on its UDP sockets. Nothing in the package changes the device's configuration beyond
// attaching the program, which the kernel removes when the program's last reference closes.
//
// ParseUDP and AppendUDP read and write the frames: the same parse as the program's, and
// Ethernet/IPv4 or IPv6/UDP frames with their checksums.
package xdp
