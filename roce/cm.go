package roce

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/crem-project/crem/psn"
)

// Communication Management (InfiniBand Architecture Specification Vol. 1, chapter 12) travels
// in Management Datagrams (MADs, chapter 13) sent as UD SEND ONLY packets to the General
// Services Interface, QP 1: BTH, DETH, the 256-octet MAD, ICRC. A MAD starts with the 24-octet
// common header; CM's Management Class is 0x07 and its attribute ID names the message.
const (
	GSIQP        = 1          // the General Services Interface queue pair
	GSIQKey      = 0x80010000 // the well-known Q_Key of QP 1
	MADLen       = 256        // every MAD, header included
	MADHeaderLen = 24         // the common MAD header
	// MgmtClassCM is the Communication Management class; CMClassVersion the version of
	// IBTA 1.2 and later.
	MgmtClassCM    = 0x07
	CMClassVersion = 2
)

// CM attribute IDs (the messages).
const (
	CMAttrClassPortInfo uint16 = 0x0001
	CMAttrREQ           uint16 = 0x0010 // ConnectRequest
	CMAttrMRA           uint16 = 0x0011 // MsgRcptAck
	CMAttrREJ           uint16 = 0x0012 // ConnectReject
	CMAttrREP           uint16 = 0x0013 // ConnectReply
	CMAttrRTU           uint16 = 0x0014 // ReadyToUse
	CMAttrDREQ          uint16 = 0x0015 // DisconnectRequest
	CMAttrDREP          uint16 = 0x0016 // DisconnectReply
)

// CM transport service types of a REQ (2 bits).
const (
	CMTransportRC = 0
	CMTransportUC = 1
	CMTransportRD = 2
	// CMTransportExtended defers to the REQ's Extended Transport Type (XRC).
	CMTransportExtended = 3
)

// ErrNotCM reports a packet that is well formed as far as it was read but is no CM MAD: not a
// UD SEND ONLY to QP 1, or a MAD of another management class.
var ErrNotCM = errors.New("not a CM MAD")

// MADHeader is the common header of every MAD.
type MADHeader struct {
	BaseVersion       uint8 // 1
	MgmtClass         uint8
	ClassVersion      uint8
	Method            uint8 // the R bit (0x80: a response) and the 7-bit method
	Status            uint16
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       uint16
	Reserved          uint16
	AttributeModifier uint32
}

// ParseMADHeader decodes the common MAD header from the start of b.
func ParseMADHeader(b []byte) (MADHeader, int, error) {
	if len(b) < MADHeaderLen {
		return MADHeader{}, 0, errShort("MAD header", MADHeaderLen, len(b))
	}
	return MADHeader{
		BaseVersion:       b[0],
		MgmtClass:         b[1],
		ClassVersion:      b[2],
		Method:            b[3],
		Status:            binary.BigEndian.Uint16(b[4:]),
		ClassSpecific:     binary.BigEndian.Uint16(b[6:]),
		TransactionID:     binary.BigEndian.Uint64(b[8:]),
		AttributeID:       binary.BigEndian.Uint16(b[16:]),
		Reserved:          binary.BigEndian.Uint16(b[18:]),
		AttributeModifier: binary.BigEndian.Uint32(b[20:]),
	}, MADHeaderLen, nil
}

// Append appends the encoded header to b.
func (h MADHeader) Append(b []byte) ([]byte, error) {
	b = append(b, h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method)
	b = binary.BigEndian.AppendUint16(b, h.Status)
	b = binary.BigEndian.AppendUint16(b, h.ClassSpecific)
	b = binary.BigEndian.AppendUint64(b, h.TransactionID)
	b = binary.BigEndian.AppendUint16(b, h.AttributeID)
	b = binary.BigEndian.AppendUint16(b, h.Reserved)
	return binary.BigEndian.AppendUint32(b, h.AttributeModifier), nil
}

// CMReq is what a ConnectRequest carries up to its primary path's GIDs (offsets from the
// start of the MAD's data, after the common header): the active side's QP and the PSN its
// first packet will carry. The rest of the message (path details, private data) is not kept.
type CMReq struct {
	LocalCommID             uint32  // 0: the active side's Communication ID
	ServiceID               uint64  // 8
	LocalCAGUID             uint64  // 16
	LocalQKey               uint32  // 28
	LocalQPN                uint32  // 32, 24 bits: the active side's QP
	ResponderResources      uint8   // 35
	LocalEECN               uint32  // 36, 24 bits
	InitiatorDepth          uint8   // 39
	RemoteEECN              uint32  // 40, 24 bits
	RemoteCMResponseTimeout uint8   // 43, 5 bits
	TransportService        uint8   // 43, 2 bits: CMTransportRC ...
	EndToEndFlowControl     bool    // 43, 1 bit
	StartingPSN             psn.PSN // 44, 24 bits: the PSN of the active side's first packet
	LocalCMResponseTimeout  uint8   // 47, 5 bits
	RetryCount              uint8   // 47, 3 bits
	PKey                    uint16  // 48
	PathMTU                 uint8   // 50, 4 bits (1: 256 ... 5: 4096)
	RDCExists               bool    // 50, 1 bit
	RNRRetryCount           uint8   // 50, 3 bits
	MaxCMRetries            uint8   // 51, 4 bits
	SRQ                     bool    // 51, 1 bit
	ExtendedTransport       uint8   // 51, 3 bits
	PrimaryLocalLID         uint16  // 52
	PrimaryRemoteLID        uint16  // 54
	PrimaryLocalGID         [16]byte
	PrimaryRemoteGID        [16]byte // 72; RoCEv2: the endpoints' IP addresses (IPv4-mapped)
}

// CMRep is what a ConnectReply carries before its private data: the passive side's QP and the
// PSN its first packet will carry; RemoteCommID ties it to its REQ's LocalCommID.
type CMRep struct {
	LocalCommID         uint32  // 0: the passive side's Communication ID
	RemoteCommID        uint32  // 4: the REQ's LocalCommID
	LocalQKey           uint32  // 8
	LocalQPN            uint32  // 12, 24 bits: the passive side's QP
	LocalEECN           uint32  // 16, 24 bits
	StartingPSN         psn.PSN // 20, 24 bits: the PSN of the passive side's first packet
	ResponderResources  uint8   // 24
	InitiatorDepth      uint8   // 25
	TargetACKDelay      uint8   // 26, 5 bits
	FailoverAccepted    uint8   // 26, 2 bits
	EndToEndFlowControl bool    // 26, 1 bit
	RNRRetryCount       uint8   // 27, 3 bits
	SRQ                 bool    // 27, 1 bit
	LocalCAGUID         uint64  // 28
}

// CM is a CM MAD taken out of a RoCEv2 packet: the DETH's source QP and Q_Key, the common MAD
// header, and the REQ or REP when AttributeID names one.
type CM struct {
	SrcQP  uint32
	QKey   uint32
	Header MADHeader
	Req    CMReq // valid when Header.AttributeID == CMAttrREQ
	Rep    CMRep // valid when Header.AttributeID == CMAttrREP
}

// madData is where a MAD's class data starts, after the common header.
const madData = MADHeaderLen

// IsGSI reports whether a RoCEv2 packet looks like a MAD to QP 1 (UD SEND ONLY, destination QP
// 1) from its BTH alone: the cheap test before ParseCM.
func IsGSI(pkt []byte) bool {
	return len(pkt) >= BTHLen && Opcode(pkt[0]) == OpUDSendOnly && get24(pkt[5:]) == GSIQP
}

// ParseCM takes apart a RoCEv2 packet (BTH to ICRC) carrying a CM MAD. A packet that is not a
// UD SEND ONLY to QP 1, or whose MAD is of another class, returns an error wrapping ErrNotCM;
// one that ends early or whose MAD is not 256 octets wraps ErrShort or ErrInvalid. It never
// reads beyond pkt and does not check the ICRC.
func ParseCM(pkt []byte) (CM, error) {
	var m CM
	bth, _, err := ParseBTH(pkt)
	if err != nil {
		return m, err
	}
	if bth.OpCode != OpUDSendOnly || bth.DestQP != GSIQP {
		return m, fmt.Errorf("roce: CM: %v to QP %#x: %w", bth.OpCode, bth.DestQP, ErrNotCM)
	}
	rest := pkt[BTHLen:]
	d, _, err := ParseDETH(rest)
	if err != nil {
		return m, fmt.Errorf("roce: CM: %w", err)
	}
	m.SrcQP, m.QKey = d.SrcQP, d.QKey
	rest = rest[DETHLen:]
	tail := int(bth.PadCount) + ICRCLen
	if len(rest) < tail {
		return m, errShort("CM: pad and ICRC", tail, len(rest))
	}
	mad := rest[:len(rest)-tail]
	if len(mad) != MADLen {
		if len(mad) < MADLen {
			return m, errShort("CM: MAD", MADLen, len(mad))
		}
		return m, errField("CM", "MAD length", uint64(len(mad)), "is not 256")
	}
	return m, parseCMMAD(&m, mad)
}

// ParseCMMAD takes apart a 256-octet CM MAD (common header first).
func ParseCMMAD(mad []byte) (CM, error) {
	var m CM
	if len(mad) != MADLen {
		if len(mad) < MADLen {
			return m, errShort("CM: MAD", MADLen, len(mad))
		}
		return m, errField("CM", "MAD length", uint64(len(mad)), "is not 256")
	}
	return m, parseCMMAD(&m, mad)
}

func parseCMMAD(m *CM, mad []byte) error {
	h, _, _ := ParseMADHeader(mad)
	m.Header = h
	if h.BaseVersion != 1 {
		return errField("CM", "MAD BaseVersion", uint64(h.BaseVersion), "is not 1")
	}
	if h.MgmtClass != MgmtClassCM {
		return fmt.Errorf("roce: CM: MAD of management class %#02x: %w", h.MgmtClass, ErrNotCM)
	}
	d := mad[madData:]
	switch h.AttributeID {
	case CMAttrREQ:
		r := &m.Req
		r.LocalCommID = binary.BigEndian.Uint32(d[0:])
		r.ServiceID = binary.BigEndian.Uint64(d[8:])
		r.LocalCAGUID = binary.BigEndian.Uint64(d[16:])
		r.LocalQKey = binary.BigEndian.Uint32(d[28:])
		r.LocalQPN, r.ResponderResources = get24(d[32:]), d[35]
		r.LocalEECN, r.InitiatorDepth = get24(d[36:]), d[39]
		r.RemoteEECN = get24(d[40:])
		r.RemoteCMResponseTimeout, r.TransportService, r.EndToEndFlowControl = d[43]>>3, d[43]>>1&3, d[43]&1 != 0
		r.StartingPSN = psn.PSN(get24(d[44:]))
		r.LocalCMResponseTimeout, r.RetryCount = d[47]>>3, d[47]&7
		r.PKey = binary.BigEndian.Uint16(d[48:])
		r.PathMTU, r.RDCExists, r.RNRRetryCount = d[50]>>4, d[50]&8 != 0, d[50]&7
		r.MaxCMRetries, r.SRQ, r.ExtendedTransport = d[51]>>4, d[51]&8 != 0, d[51]&7
		r.PrimaryLocalLID = binary.BigEndian.Uint16(d[52:])
		r.PrimaryRemoteLID = binary.BigEndian.Uint16(d[54:])
		copy(r.PrimaryLocalGID[:], d[56:72])
		copy(r.PrimaryRemoteGID[:], d[72:88])
	case CMAttrREP:
		r := &m.Rep
		r.LocalCommID = binary.BigEndian.Uint32(d[0:])
		r.RemoteCommID = binary.BigEndian.Uint32(d[4:])
		r.LocalQKey = binary.BigEndian.Uint32(d[8:])
		r.LocalQPN = get24(d[12:])
		r.LocalEECN = get24(d[16:])
		r.StartingPSN = psn.PSN(get24(d[20:]))
		r.ResponderResources, r.InitiatorDepth = d[24], d[25]
		r.TargetACKDelay, r.FailoverAccepted, r.EndToEndFlowControl = d[26]>>3, d[26]>>1&3, d[26]&1 != 0
		r.RNRRetryCount, r.SRQ = d[27]>>5, d[27]&0x10 != 0
		r.LocalCAGUID = binary.BigEndian.Uint64(d[28:])
	}
	return nil
}

// cmHeader is the common header of a CM MAD of attr: a Send (method 0x03) of class version 2.
func cmHeader(tid uint64, attr uint16) MADHeader {
	return MADHeader{BaseVersion: 1, MgmtClass: MgmtClassCM, ClassVersion: CMClassVersion, Method: 0x03,
		TransactionID: tid, AttributeID: attr}
}

func checkBits(what, field string, v uint64, bits uint) error {
	if v >= 1<<bits {
		return errField(what, field, v, fmt.Sprintf("exceeds %d bits", bits))
	}
	return nil
}

// AppendMAD appends the 256-octet CM MAD of the REQ (a Send, class version 2, transaction ID
// tid); the fields CMReq does not hold are zero.
func (r CMReq) AppendMAD(b []byte, tid uint64) ([]byte, error) {
	for _, c := range []struct {
		f    string
		v    uint64
		bits uint
	}{{"LocalQPN", uint64(r.LocalQPN), 24}, {"LocalEECN", uint64(r.LocalEECN), 24}, {"RemoteEECN", uint64(r.RemoteEECN), 24},
		{"RemoteCMResponseTimeout", uint64(r.RemoteCMResponseTimeout), 5}, {"TransportService", uint64(r.TransportService), 2},
		{"StartingPSN", uint64(r.StartingPSN), 24}, {"LocalCMResponseTimeout", uint64(r.LocalCMResponseTimeout), 5},
		{"RetryCount", uint64(r.RetryCount), 3}, {"PathMTU", uint64(r.PathMTU), 4}, {"RNRRetryCount", uint64(r.RNRRetryCount), 3},
		{"MaxCMRetries", uint64(r.MaxCMRetries), 4}, {"ExtendedTransport", uint64(r.ExtendedTransport), 3}} {
		if err := checkBits("CM REQ", c.f, c.v, c.bits); err != nil {
			return b, err
		}
	}
	start := len(b)
	b, _ = cmHeader(tid, CMAttrREQ).Append(b)
	b = append(b, make([]byte, MADLen-MADHeaderLen)...)
	d := b[start+madData:]
	binary.BigEndian.PutUint32(d[0:], r.LocalCommID)
	binary.BigEndian.PutUint64(d[8:], r.ServiceID)
	binary.BigEndian.PutUint64(d[16:], r.LocalCAGUID)
	binary.BigEndian.PutUint32(d[28:], r.LocalQKey)
	put24(d[32:], r.LocalQPN)
	d[35] = r.ResponderResources
	put24(d[36:], r.LocalEECN)
	d[39] = r.InitiatorDepth
	put24(d[40:], r.RemoteEECN)
	d[43] = r.RemoteCMResponseTimeout<<3 | r.TransportService<<1 | b2u(r.EndToEndFlowControl)
	put24(d[44:], uint32(r.StartingPSN))
	d[47] = r.LocalCMResponseTimeout<<3 | r.RetryCount
	binary.BigEndian.PutUint16(d[48:], r.PKey)
	d[50] = r.PathMTU<<4 | b2u(r.RDCExists)<<3 | r.RNRRetryCount
	d[51] = r.MaxCMRetries<<4 | b2u(r.SRQ)<<3 | r.ExtendedTransport
	binary.BigEndian.PutUint16(d[52:], r.PrimaryLocalLID)
	binary.BigEndian.PutUint16(d[54:], r.PrimaryRemoteLID)
	copy(d[56:72], r.PrimaryLocalGID[:])
	copy(d[72:88], r.PrimaryRemoteGID[:])
	return b, nil
}

// AppendMAD appends the 256-octet CM MAD of the REP (a Send, class version 2, transaction ID
// tid, which answers the REQ's); the private data is zero.
func (r CMRep) AppendMAD(b []byte, tid uint64) ([]byte, error) {
	for _, c := range []struct {
		f    string
		v    uint64
		bits uint
	}{{"LocalQPN", uint64(r.LocalQPN), 24}, {"LocalEECN", uint64(r.LocalEECN), 24}, {"StartingPSN", uint64(r.StartingPSN), 24},
		{"TargetACKDelay", uint64(r.TargetACKDelay), 5}, {"FailoverAccepted", uint64(r.FailoverAccepted), 2},
		{"RNRRetryCount", uint64(r.RNRRetryCount), 3}} {
		if err := checkBits("CM REP", c.f, c.v, c.bits); err != nil {
			return b, err
		}
	}
	start := len(b)
	b, _ = cmHeader(tid, CMAttrREP).Append(b)
	b = append(b, make([]byte, MADLen-MADHeaderLen)...)
	d := b[start+madData:]
	binary.BigEndian.PutUint32(d[0:], r.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], r.RemoteCommID)
	binary.BigEndian.PutUint32(d[8:], r.LocalQKey)
	put24(d[12:], r.LocalQPN)
	put24(d[16:], r.LocalEECN)
	put24(d[20:], uint32(r.StartingPSN))
	d[24], d[25] = r.ResponderResources, r.InitiatorDepth
	d[26] = r.TargetACKDelay<<3 | r.FailoverAccepted<<1 | b2u(r.EndToEndFlowControl)
	d[27] = r.RNRRetryCount<<5 | b2u(r.SRQ)<<4
	binary.BigEndian.PutUint64(d[28:], r.LocalCAGUID)
	return b, nil
}

// AppendGSIPacket appends a RoCEv2 packet carrying mad to QP 1: BTH (UD SEND ONLY, the
// partition key, PSN p), DETH (Q_Key 0x80010000, source QP 1), the MAD and a zero ICRC to be
// sealed afterwards (SealICRC or LogicalHeader.Seal).
func AppendGSIPacket(b []byte, pkey uint16, p psn.PSN, mad []byte) ([]byte, error) {
	if len(mad) != MADLen {
		return b, errField("GSI packet", "MAD length", uint64(len(mad)), "is not 256")
	}
	pk := Packet{BTH: BTH{OpCode: OpUDSendOnly, PKey: pkey, DestQP: GSIQP, PSN: p},
		DETH: DETH{QKey: GSIQKey, SrcQP: GSIQP}, Payload: mad}
	return pk.Append(b)
}

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}
