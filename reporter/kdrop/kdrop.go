// Package kdrop is a source of node-local drops for the path reporter (PATH_REPORT method 3):
// an eBPF program on the kernel's skb:kfree_skb tracepoint that sees every packet the kernel
// frees as dropped, with the kernel's reason, and passes on those of RoCEv2 datagrams (UDP to
// the configured ports, IPv4 or IPv6) dropped on the configured devices of a router's network
// namespace for the configured reasons (by default the queue's own: a qdisc that overflowed).
//
// The program only reads; the filtering is done in the kernel, so the drops of other devices,
// namespaces and protocols cost one map lookup each. Its object is compiled from kdrop.c and
// committed (bpf2go), so building crem needs no C compiler; it is relocated to the running
// kernel with BTF (CO-RE) when loaded. Events come through a ring buffer; drops that find it
// full are counted per flow in the kernel and come back through Lost, without PSNs.
package kdrop

import (
	"errors"
	"net/netip"

	"github.com/crem-project/crem/psn"
)

// Errors of Open that mean the node cannot run the program at all (crem reporter exits 2).
var (
	ErrNoBTF        = errors.New("the kernel has no BTF (/sys/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF)")
	ErrPermission   = errors.New("not allowed to load eBPF programs (needs CAP_BPF and CAP_PERFMON, or root)")
	ErrNoTracepoint = errors.New("the kernel offers neither tp_btf/kfree_skb nor the tracepoint skb:kfree_skb")
	ErrNotSupported = errors.New("kernel drop source: only on Linux, little-endian")
)

// Device is a device of the router whose drops are reported.
type Device struct {
	// Ifindex and Netns (the network namespace's cookie, SO_NETNS_COOKIE) name the device;
	// the program runs in softirq context, where the current process says nothing.
	Ifindex int
	Netns   uint64
	// Port is the engine port the device's drops are counted on (the per-port report limit).
	Port int
}

// Config sets up the source.
type Config struct {
	Devices []Device
	// Ports are the UDP destination ports of the protected datagrams (4791 for RoCEv2, and
	// those a relay-mode gateway pair uses).
	Ports []uint16
	// Reasons are the kernel's drop reasons (enum skb_drop_reason, below 256) to pass on.
	Reasons []uint32
	// RingSize is the ring buffer's size in octets, a power of two (default 1 MiB).
	RingSize int
	// Tracepoint skips tp_btf and attaches to the classic tracepoint (the fallback, for tests).
	Tracepoint bool
	// Linear skips the program that reads packets through the skb's dynptr (kernels that
	// allow bpf_dynptr_from_skb in tracing programs) for the one that reads the linear part of
	// the buffer only (the fallback, for tests).
	Linear bool
}

// MaxPSNs is the most PSNs one event names; the other segments of a larger GSO packet are
// counted unnamed.
const MaxPSNs = 64

// Event is one dropped packet of a protected flow. A GSO packet carries several datagrams:
// Segments counts them, PSNs names those whose headers the program could read (the linear
// part of the buffer); the rest are dropped unnamed.
type Event struct {
	Port     int
	Ifindex  int
	Reason   uint32
	Src, Dst netip.Addr
	DestQP   uint32
	PSNs     []psn.PSN
	Segments int
}

// Lost is a flow's drops that found the ring buffer full since the last call to Source.Lost:
// Count datagrams, PSNs unknown.
type Lost struct {
	Port     int
	Reason   uint32
	Src, Dst netip.Addr
	DestQP   uint32
	Count    uint64
}

// Counters are the program's own counters, summed over CPUs.
type Counters struct {
	Matched      uint64 // drops on a configured device for a configured reason
	Events       uint64 // events written to the ring buffer
	EventsLost   uint64 // events the full ring buffer refused
	NotRoCE      uint64 // matched drops that were not UDP to a configured port
	SegmentsLost uint64 // datagrams of the refused events (counted per flow, see Source.Lost)
	// NotLinear counts matched datagrams whose RoCEv2 header the program could not read
	// (without the skb's dynptr: it lay in the buffer's page fragments): not reported, there is
	// no flow to name.
	NotLinear uint64
	// GSO counts matched packets that carried several datagrams.
	GSO uint64
}

func addrOf(family uint8, b [16]uint8) netip.Addr {
	if family == 4 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

func cutPrefix(name string) (string, bool) {
	const p = "SKB_DROP_REASON_"
	if len(name) > len(p) && name[:len(p)] == p {
		return name[len(p):], true
	}
	return "", false
}
