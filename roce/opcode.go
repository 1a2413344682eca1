package roce

import "fmt"

// Opcode is the BTH OpCode: a 3-bit transport prefix and a 5-bit operation.
type Opcode uint8

// The RC opcodes (IBTA), the RoCEv2 congestion notification packet and the two UD SENDs.
const (
	OpSendFirst               Opcode = 0x00
	OpSendMiddle              Opcode = 0x01
	OpSendLast                Opcode = 0x02
	OpSendLastWithImmediate   Opcode = 0x03
	OpSendOnly                Opcode = 0x04
	OpSendOnlyWithImmediate   Opcode = 0x05
	OpWriteFirst              Opcode = 0x06
	OpWriteMiddle             Opcode = 0x07
	OpWriteLast               Opcode = 0x08
	OpWriteLastWithImmediate  Opcode = 0x09
	OpWriteOnly               Opcode = 0x0a
	OpWriteOnlyWithImmediate  Opcode = 0x0b
	OpReadRequest             Opcode = 0x0c
	OpReadResponseFirst       Opcode = 0x0d
	OpReadResponseMiddle      Opcode = 0x0e
	OpReadResponseLast        Opcode = 0x0f
	OpReadResponseOnly        Opcode = 0x10
	OpAcknowledge             Opcode = 0x11
	OpAtomicAcknowledge       Opcode = 0x12
	OpCompareSwap             Opcode = 0x13
	OpFetchAdd                Opcode = 0x14
	OpSendLastWithInvalidate  Opcode = 0x16
	OpSendOnlyWithInvalidate  Opcode = 0x17
	OpCNP                     Opcode = 0x81
	OpUDSendOnly              Opcode = 0x64
	OpUDSendOnlyWithImmediate Opcode = 0x65
)

// operationMask keeps the operation bits of an opcode, below the 3-bit transport prefix.
const operationMask Opcode = 0x1f

// Transport is the service an opcode belongs to (its top three bits).
type Transport uint8

// The transports named by the opcode prefix.
const (
	TransportRC     Transport = 0 // reliable connection
	TransportUC     Transport = 1 // unreliable connection
	TransportRD     Transport = 2 // reliable datagram
	TransportUD     Transport = 3 // unreliable datagram
	TransportCNP    Transport = 4 // RoCEv2 congestion notification
	TransportXRC    Transport = 5 // extended reliable connection
	TransportVendor Transport = 6 // 110 and 111: manufacturer specific
)

func (t Transport) String() string {
	return [...]string{"RC", "UC", "RD", "UD", "CNP", "XRC", "vendor"}[min(t, TransportVendor)]
}

// Headers is a set of the extension headers and parts a packet carries after its BTH.
type Headers uint16

// The parts a packet may carry, in wire order after the BTH.
const (
	HasDETH Headers = 1 << iota
	HasRETH
	HasAtomicETH
	HasAETH
	HasTCAETH // only by length, on ACKNOWLEDGE and ATOMIC ACKNOWLEDGE (RULINGS T2)
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasPayload
)

// OpcodeInfo describes an opcode.
type OpcodeInfo struct {
	Name      string // IBTA operation name without the transport, e.g. SEND_FIRST; "" if undefined
	Transport Transport
	Known     bool    // a defined opcode whose headers this package can parse
	Headers   Headers // what follows the BTH (HasTCAETH never appears here)
	Request   bool    // sent by the requester; false for responses, ACKs and CNP
	// Source is true when the packet takes a new PSN of its direction and so may be a CREM
	// source packet: every request and every READ response; never ACKNOWLEDGE, ATOMIC
	// ACKNOWLEDGE or CNP (RULINGS C13).
	Source bool
}

type opDef struct {
	name    string
	headers Headers
	request bool
}

// rcOps is the RC operation table, indexed by the low five bits; UC and XRC reuse its names.
var rcOps = [32]opDef{
	0x00: {"SEND_FIRST", HasPayload, true},
	0x01: {"SEND_MIDDLE", HasPayload, true},
	0x02: {"SEND_LAST", HasPayload, true},
	0x03: {"SEND_LAST_WITH_IMMEDIATE", HasImmDt | HasPayload, true},
	0x04: {"SEND_ONLY", HasPayload, true},
	0x05: {"SEND_ONLY_WITH_IMMEDIATE", HasImmDt | HasPayload, true},
	0x06: {"RDMA_WRITE_FIRST", HasRETH | HasPayload, true},
	0x07: {"RDMA_WRITE_MIDDLE", HasPayload, true},
	0x08: {"RDMA_WRITE_LAST", HasPayload, true},
	0x09: {"RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt | HasPayload, true},
	0x0a: {"RDMA_WRITE_ONLY", HasRETH | HasPayload, true},
	0x0b: {"RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt | HasPayload, true},
	0x0c: {"RDMA_READ_REQUEST", HasRETH, true},
	0x0d: {"RDMA_READ_RESPONSE_FIRST", HasAETH | HasPayload, false},
	0x0e: {"RDMA_READ_RESPONSE_MIDDLE", HasPayload, false},
	0x0f: {"RDMA_READ_RESPONSE_LAST", HasAETH | HasPayload, false},
	0x10: {"RDMA_READ_RESPONSE_ONLY", HasAETH | HasPayload, false},
	0x11: {"ACKNOWLEDGE", HasAETH, false},
	0x12: {"ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, false},
	0x13: {"COMPARE_SWAP", HasAtomicETH, true},
	0x14: {"FETCH_ADD", HasAtomicETH, true},
	0x16: {"SEND_LAST_WITH_INVALIDATE", HasIETH | HasPayload, true},
	0x17: {"SEND_ONLY_WITH_INVALIDATE", HasIETH | HasPayload, true},
}

// Info returns what the opcode table says about op. Opcodes outside RC, the UC subset
// (SEND and RDMA WRITE), UD SEND and CNP are named but not Known.
func (op Opcode) Info() OpcodeInfo { return opInfos[op] }

// opInfos holds Info for every opcode, built once from the table above and never written
// again: every packet looks its opcode up, so this is an index, not a computation.
var opInfos = func() (t [256]OpcodeInfo) {
	for i := range t {
		t[i] = Opcode(i).info()
	}
	return t
}()

func (op Opcode) info() OpcodeInfo {
	t := Transport(op >> 5)
	if t > TransportVendor {
		t = TransportVendor
	}
	low := op & operationMask
	info := OpcodeInfo{Transport: t}
	switch t {
	case TransportRC:
		if d := rcOps[low]; d.name != "" {
			info.Name, info.Known, info.Headers, info.Request = d.name, true, d.headers, d.request
			info.Source = d.request || low >= OpReadResponseFirst && low <= OpReadResponseOnly
		}
	case TransportUC:
		// UC carries the RC SEND and RDMA WRITE operations with the same headers.
		if low <= OpWriteOnlyWithImmediate {
			d := rcOps[low]
			info.Name, info.Known, info.Headers, info.Request, info.Source = d.name, true, d.headers, true, true
		}
	case TransportUD:
		switch op {
		case OpUDSendOnly:
			info.Name, info.Known, info.Headers = "SEND_ONLY", true, HasDETH|HasPayload
		case OpUDSendOnlyWithImmediate:
			info.Name, info.Known, info.Headers = "SEND_ONLY_WITH_IMMEDIATE", true, HasDETH|HasImmDt|HasPayload
		}
		info.Request, info.Source = info.Known, info.Known
	case TransportCNP:
		if op == OpCNP {
			// A RoCEv2 CNP carries 16 reserved octets after its BTH.
			info.Name, info.Known, info.Headers = "CNP", true, HasPayload
		}
	case TransportXRC:
		if d := rcOps[low]; d.name != "" {
			info.Name = d.name // named only: XRC adds an XRCETH this package does not parse
		}
	}
	return info
}

// String returns the opcode's name: the bare IBTA name for RC (SEND_FIRST), prefixed by the
// transport otherwise (UC_SEND_FIRST, UD_SEND_ONLY), CNP for the congestion notification, and
// OPCODE_0xNN for an undefined one.
func (op Opcode) String() string {
	info := op.Info()
	switch {
	case info.Name == "":
		return fmt.Sprintf("OPCODE_%#02x", uint8(op))
	case info.Transport == TransportRC || op == OpCNP:
		return info.Name
	}
	return info.Transport.String() + "_" + info.Name
}

// PSNs returns how many PSNs a request with this opcode consumes in its direction: a READ
// request max(1, ceil(dmaLength / mtu)) (RULINGS C13; the request occupies the first, the
// responses use the rest), any other source 1, and ACKs and CNP none. An mtu of 0 counts as
// one PSN per READ.
func (op Opcode) PSNs(dmaLength, mtu uint32) uint32 {
	info := op.Info()
	switch {
	case !info.Source:
		return 0
	case op == OpReadRequest && mtu > 0:
		n := dmaLength / mtu
		if dmaLength%mtu != 0 {
			n++
		}
		return max(1, n)
	}
	return 1
}
