package wire

import (
	"encoding/binary"
	"net/netip"
)

// The peeks read the few fields a router needs to hand a message to the engine that owns it,
// at their fixed offsets, and nothing else: the engine then parses the message once, and counts
// it if it is malformed. A peek reports false only when the fields it reads are not there
// (another Version or Type, too short, an AF that is neither 4 nor 6); a datagram a peek accepts
// may still be refused by the parser.

// FlowName is how HELLO and PATH_REPORT name a flow before it has a Flow ID: by its addresses
// and the Flow Label (RoCEv2: the destination QP in its low 24 bits).
type FlowName struct {
	Source, Destination netip.Addr
	FlowLabel           uint32
}

// DestQP returns the destination QP the Flow Label carries.
func (n FlowName) DestQP() uint32 { return n.FlowLabel & 0xffffff }

// Fixed offsets of the routed fields: the common header is 8 octets; HELLO and HELLO_ACK
// follow it with the 12 octets of capabilities (AF is the second) and the Sender Nonce;
// PATH_REPORT with Method, Entry Count, AF and a reserved octet.
const (
	helloAFOff       = HeaderLen + 1
	helloNonceOff    = HeaderLen + capabilitiesLen
	helloAddrOff     = helloNonceOff + 8
	pathReportAFOff  = HeaderLen + 2
	pathReportAddrOf = HeaderLen + 4
)

// PeekHelloFlow returns the flow a HELLO names.
func PeekHelloFlow(b []byte) (FlowName, bool) {
	if !isType(b, TypeHello) || len(b) <= helloAFOff {
		return FlowName{}, false
	}
	return peekFlowName(b, AF(b[helloAFOff]), helloAddrOff)
}

// PeekHelloAckNonce returns the Sender Nonce a HELLO_ACK echoes: the CSF that sent the HELLO
// with it owns the answer.
func PeekHelloAckNonce(b []byte) (uint64, bool) {
	if !isType(b, TypeHelloAck) || len(b) < helloNonceOff+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[helloNonceOff:]), true
}

// PeekPathReportFlow returns the flow a PATH_REPORT names.
func PeekPathReportFlow(b []byte) (FlowName, bool) {
	if !isType(b, TypePathReport) || len(b) <= pathReportAFOff {
		return FlowName{}, false
	}
	return peekFlowName(b, AF(b[pathReportAFOff]), pathReportAddrOf)
}

// PeekFlowID returns the Flow ID of any CREM message of this Version.
func PeekFlowID(b []byte) (uint32, bool) {
	if len(b) < HeaderLen || b[0]>>4 != Version {
		return 0, false
	}
	return binary.BigEndian.Uint32(b[4:8]), true
}

func isType(b []byte, t Type) bool {
	return len(b) >= HeaderLen && b[0] == Version<<4|uint8(t)
}

// peekFlowName reads two addresses of family af from off and the Flow Label after them.
func peekFlowName(b []byte, af AF, off int) (FlowName, bool) {
	if !af.Valid() {
		return FlowName{}, false
	}
	n := af.AddrLen()
	if len(b) < off+2*n+4 {
		return FlowName{}, false
	}
	var f FlowName
	if af == AF4 {
		f.Source = netip.AddrFrom4([4]byte(b[off : off+4]))
		f.Destination = netip.AddrFrom4([4]byte(b[off+4 : off+8]))
	} else {
		f.Source = netip.AddrFrom16([16]byte(b[off : off+16]))
		f.Destination = netip.AddrFrom16([16]byte(b[off+16 : off+32]))
	}
	f.FlowLabel = binary.BigEndian.Uint32(b[off+2*n:])
	return f, true
}
