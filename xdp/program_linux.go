//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// XDP actions (enum xdp_action).
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

// MaxPorts bounds the ports one program matches.
const MaxPorts = 16

// MaxQueues bounds the receive queues a program redirects (the XSKMAP's size).
const MaxQueues = 64

// Counter indexes in the program's per-CPU counter array.
const (
	counterRedirected = 0
	counterNoSocket   = 1
	counterCount      = 2
)

// wire16 is the value a native-endian 16-bit load reads from the network-order octets of v.
func wire16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// instructions is the XDP program. Registers: R6 the context, R2 data, R3 data_end, R4 the
// header being read, R5 and R7 scratch.
func instructions() asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // xdp_md.data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // xdp_md.data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, ethLen),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half), // EtherType (a VLAN tag is neither)
		asm.JEq.Imm(asm.R5, wire16(typeIPv4), "ipv4"),
		asm.JEq.Imm(asm.R5, wire16(typeIPv6), "ipv6"),
		asm.Ja.Label("pass"),

		// IPv4: version 4, IHL >= 5, not a fragment, protocol UDP; R4 = the UDP header.
		asm.Mov.Reg(asm.R4, asm.R2).WithSymbol("ipv4"),
		asm.Add.Imm(asm.R4, ethLen+ipv4Min),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, ethLen, asm.Byte),
		asm.Mov.Reg(asm.R7, asm.R5),
		asm.RSh.Imm(asm.R7, 4),
		asm.JNE.Imm(asm.R7, 4, "pass"),
		asm.And.Imm(asm.R5, 0x0f),
		asm.JLT.Imm(asm.R5, 5, "pass"),
		asm.LoadMem(asm.R7, asm.R2, ethLen+6, asm.Half), // flags and fragment offset
		asm.And.Imm(asm.R7, wire16(0x3fff)),             // MF or an offset: a fragment
		asm.JNE.Imm(asm.R7, 0, "pass"),
		asm.LoadMem(asm.R7, asm.R2, ethLen+9, asm.Byte),
		asm.JNE.Imm(asm.R7, protoUDP, "pass"),
		asm.LSh.Imm(asm.R5, 2),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, ethLen),
		asm.Add.Reg(asm.R4, asm.R5),
		asm.Ja.Label("udp"),

		// IPv6: version 6, next header UDP (extension headers pass); R4 = the UDP header.
		asm.Mov.Reg(asm.R4, asm.R2).WithSymbol("ipv6"),
		asm.Add.Imm(asm.R4, ethLen+ipv6Len),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, ethLen, asm.Byte),
		asm.RSh.Imm(asm.R5, 4),
		asm.JNE.Imm(asm.R5, 6, "pass"),
		asm.LoadMem(asm.R5, asm.R2, ethLen+6, asm.Byte),
		asm.JNE.Imm(asm.R5, protoUDP, "pass"),

		// UDP: the destination port, as on the wire, is the ports map's key.
		asm.Mov.Reg(asm.R5, asm.R4).WithSymbol("udp"),
		asm.Add.Imm(asm.R5, udpLen),
		asm.JGT.Reg(asm.R5, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R4, 2, asm.Half),
		asm.StoreMem(asm.RFP, -8, asm.R5, asm.Half),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.LoadMapPtr(asm.R1, 0).WithReference("ports"),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),

		// To the socket of the frame's receive queue; XDP_PASS where there is none.
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word), // xdp_md.rx_queue_index
		asm.LoadMapPtr(asm.R1, 0).WithReference("xsks"),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreImm(asm.RFP, -4, counterRedirected, asm.Word),
		asm.JEq.Imm(asm.R7, xdpRedirect, "count"),
		asm.StoreImm(asm.RFP, -4, counterNoSocket, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP).WithSymbol("count"),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, 0).WithReference("counters"),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R0, asm.R7).WithSymbol("out"),
		asm.Return(),

		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// collectionSpec is the program and its three maps.
func collectionSpec(frags bool) *ebpf.CollectionSpec {
	var flags uint32
	if frags {
		flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"ports":    {Name: "crem_xdp_ports", Type: ebpf.Hash, KeySize: 2, ValueSize: 1, MaxEntries: MaxPorts},
			"xsks":     {Name: "crem_xdp_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: MaxQueues},
			"counters": {Name: "crem_xdp_count", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: counterCount},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"crem_xdp": {Name: "crem_xdp", Type: ebpf.XDP, License: "Dual MIT/GPL", Instructions: instructions(), Flags: flags},
		},
	}
}

// Program is the loaded XDP program with its maps, attached to at most one interface.
type Program struct {
	coll     *ebpf.Collection
	prog     *ebpf.Program
	ports    *ebpf.Map
	xsks     *ebpf.Map
	counters *ebpf.Map
	link     link.Link
	mode     string
	frags    bool
}

// LoadProgram loads the program (it verifies in the kernel) with the UDP destination ports it
// sends to AF_XDP sockets, at most MaxPorts of them.
func LoadProgram(ports ...uint16) (*Program, error) {
	if len(ports) == 0 || len(ports) > MaxPorts {
		return nil, fmt.Errorf("xdp: %d ports, want 1 to %d", len(ports), MaxPorts)
	}
	// Frags-aware (BPF_F_XDP_HAS_FRAGS, Linux 5.18): a packet longer than a page reaches the
	// program, and the AF_XDP socket, in several buffers instead of being linearized or
	// refused; the program reads only the headers, which lie in the first. Kernels before take
	// the program without the flag.
	frags := true
	coll, err := ebpf.NewCollection(collectionSpec(true))
	if err != nil {
		frags = false
		if coll, err = ebpf.NewCollection(collectionSpec(false)); err != nil {
			return nil, fmt.Errorf("xdp: loading the program: %w", err)
		}
	}
	p := &Program{coll: coll, prog: coll.Programs["crem_xdp"], ports: coll.Maps["ports"],
		xsks: coll.Maps["xsks"], counters: coll.Maps["counters"], frags: frags}
	for _, port := range ports {
		var key [2]byte
		binary.BigEndian.PutUint16(key[:], port)
		if err := p.ports.Put(key, uint8(1)); err != nil {
			coll.Close()
			return nil, fmt.Errorf("xdp: port %d into the program's map: %w", port, err)
		}
	}
	return p, nil
}

// Frags reports whether the program was loaded frags-aware (multi-buffer packets reach it).
func (p *Program) Frags() bool { return p.frags }

// Attach attaches the program to the interface ifindex (of the calling thread's network
// namespace). AttachAuto tries driver mode, then generic mode; AttachMode says which held.
func (p *Program) Attach(ifindex int, mode AttachMode) error {
	if p.link != nil {
		return errors.New("xdp: the program is already attached")
	}
	try := func(flags link.XDPAttachFlags, name string) error {
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
		if err != nil {
			return fmt.Errorf("xdp: attaching in %s mode to interface %d: %w", name, ifindex, err)
		}
		p.link, p.mode = l, name
		return nil
	}
	switch mode {
	case AttachGeneric:
		return try(link.XDPGenericMode, "generic")
	case AttachDriver:
		return try(link.XDPDriverMode, "driver")
	case AttachAuto:
		errDrv := try(link.XDPDriverMode, "driver")
		if errDrv == nil {
			return nil
		}
		if err := try(link.XDPGenericMode, "generic"); err != nil {
			return errors.Join(errDrv, err)
		}
		return nil
	}
	return fmt.Errorf("xdp: unknown attach mode %d", mode)
}

// AttachMode is "driver" or "generic" once attached, "" before.
func (p *Program) AttachMode() string { return p.mode }

// Register has frames of receive queue queue that match a port go to s.
func (p *Program) Register(queue int, s *Socket) error {
	if queue < 0 || queue >= MaxQueues {
		return fmt.Errorf("xdp: queue %d outside 0..%d", queue, MaxQueues-1)
	}
	if err := p.xsks.Put(uint32(queue), uint32(s.fd)); err != nil {
		return fmt.Errorf("xdp: socket of queue %d into the XSKMAP: %w", queue, err)
	}
	return nil
}

// Unregister sends queue's matching frames back to the kernel's stack.
func (p *Program) Unregister(queue int) error {
	if err := p.xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp: socket of queue %d out of the XSKMAP: %w", queue, err)
	}
	return nil
}

// Counters sums the program's counters over the CPUs.
func (p *Program) Counters() (ProgramCounters, error) {
	var c ProgramCounters
	for i, dst := range []*uint64{&c.Redirected, &c.NoSocket} {
		var per []uint64
		if err := p.counters.Lookup(uint32(i), &per); err != nil {
			return c, fmt.Errorf("xdp: program counter %d: %w", i, err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return c, nil
}

// Detach takes the program off its interface (every frame then takes the kernel's path); it may
// be attached again.
func (p *Program) Detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link, p.mode = nil, ""
	if err != nil {
		return fmt.Errorf("xdp: detaching: %w", err)
	}
	return nil
}

// Close detaches the program and releases it and its maps.
func (p *Program) Close() error {
	var err error
	if p.link != nil {
		err = p.link.Close()
		p.link, p.mode = nil, ""
	}
	p.coll.Close()
	if err != nil {
		return fmt.Errorf("xdp: detaching: %w", err)
	}
	return nil
}
