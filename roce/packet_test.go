package roce

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

// samplePacket fills every header an opcode may carry with distinct values.
func samplePacket(op Opcode, payload []byte) Packet {
	return Packet{
		BTH:          BTH{OpCode: op, SE: true, PKey: 0xffff, DestQP: 0x000045, AckReq: true, PSN: 0x00fffe},
		DETH:         DETH{QKey: 0x11111111, SrcQP: 0x22},
		RETH:         RETH{VA: 0x1000, RKey: 0x33, DMALength: 4096},
		AtomicETH:    AtomicETH{VA: 0x2000, RKey: 0x44, SwapAdd: 5, Compare: 6},
		AETH:         ACK(CreditInvalid, 77),
		AtomicAckETH: AtomicAckETH{OrigRemData: 0x0123456789abcdef},
		ImmDt:        0xabcdef01,
		IETH:         0x55,
		Payload:      payload,
	}
}

var (
	v4Flow = LogicalHeader{Src: netip.MustParseAddr("192.168.70.4"), Dst: netip.MustParseAddr("192.168.70.6"), SrcPort: 0xc001}
	v6Flow = LogicalHeader{Src: netip.MustParseAddr("2001:db8::4"), Dst: netip.MustParseAddr("2001:db8::6"), SrcPort: 0xc001}
)

// Section 5: every parseable opcode, with payloads of every length modulo 4, encodes to the
// length its headers, payload and pad add up to, with PadCount rounding the payload to a
// multiple of 4 and zero pad; seals and verifies under IPv4 and IPv6 logical headers; and parses
// back to the same headers and payload.
func TestPacketRoundTripEveryOpcodeSection5(t *testing.T) {
	for op := range Opcode(0xff) {
		info := op.Info()
		if !info.Known {
			continue
		}
		lens := []int{0}
		if info.Headers&HasPayload != 0 {
			lens = []int{0, 1, 2, 3, 4, 5, 1023, 1024}
		}
		for _, n := range lens {
			payload := bytes.Repeat([]byte{0x5a}, n)
			p := samplePacket(op, payload)
			b, err := p.Append(nil)
			if err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			if len(b) != p.Len() || len(b)%4 != 0 {
				t.Fatalf("%v payload %d: %d octets, Len %d, not a multiple of 4", op, n, len(b), p.Len())
			}
			pad := PadLen(n)
			if got := int(b[1] >> 4 & 3); got != pad {
				t.Errorf("%v payload %d: PadCount %d, want %d", op, n, got, pad)
			}
			if !bytes.Equal(b[len(b)-ICRCLen-pad:len(b)-ICRCLen], make([]byte, pad)) {
				t.Errorf("%v payload %d: pad not zero", op, n)
			}
			for _, flow := range []LogicalHeader{v4Flow, v6Flow} {
				if err := flow.Seal(b); err != nil {
					t.Fatal(err)
				}
				if err := flow.Verify(b); err != nil {
					t.Errorf("%v payload %d %v: %v", op, n, flow.Src, err)
				}
			}
			back, err := ParsePacket(b)
			if err != nil {
				t.Fatalf("%v payload %d: %v", op, n, err)
			}
			if !bytes.Equal(back.Payload, payload) || back.Headers != info.Headers {
				t.Errorf("%v payload %d: parsed payload %d octets, headers %#x", op, n, len(back.Payload), back.Headers)
			}
			// Compare the headers the opcode carries, field by field.
			want := p
			want.BTH.PadCount = uint8(pad)
			want.Headers, want.Payload, want.ICRC = back.Headers, back.Payload, back.ICRC
			clearAbsent(&want)
			if !reflect.DeepEqual(back, want) {
				t.Errorf("%v payload %d: parsed\n%+v\nwant\n%+v", op, n, back, want)
			}
			if n > 0 && &back.Payload[0] != &b[p.HeaderLen()] {
				t.Errorf("%v: payload does not alias the input", op)
			}
		}
	}
}

// clearAbsent zeroes the headers p does not carry, as a parse leaves them.
func clearAbsent(p *Packet) {
	h := p.Headers
	if h&HasDETH == 0 {
		p.DETH = DETH{}
	}
	if h&HasRETH == 0 {
		p.RETH = RETH{}
	}
	if h&HasAtomicETH == 0 {
		p.AtomicETH = AtomicETH{}
	}
	if h&HasAETH == 0 {
		p.AETH = AETH{}
	}
	if h&HasTCAETH == 0 {
		p.TCAETH = TCAETH{}
	}
	if h&HasAtomicAckETH == 0 {
		p.AtomicAckETH = AtomicAckETH{}
	}
	if h&HasImmDt == 0 {
		p.ImmDt = 0
	}
	if h&HasIETH == 0 {
		p.IETH = 0
	}
}

// RULINGS T2: an extended ACK is BTH (ACKNOWLEDGE) + AETH + T/C AETH, 12 + 4 + 32 + 4 octets,
// with BTH PSN = Last Finished PSN; with an atomic answer, ATOMIC ACKNOWLEDGE + AETH + T/C AETH +
// AtomicAckETH. The parser tells them from plain ACKs by length.
func TestExtendedACKT2(t *testing.T) {
	tc := TCAETH{LastFinished: 199, NumSegs: 2, Segs: [3]Segment{{300, 399}, {500, 599}}}
	for _, c := range []struct {
		op     Opcode
		length int
		order  []Headers
	}{
		{OpAcknowledge, 52, []Headers{HasAETH, HasTCAETH}},
		{OpAtomicAcknowledge, 60, []Headers{HasAETH, HasTCAETH, HasAtomicAckETH}},
	} {
		p := Packet{
			BTH:          BTH{OpCode: c.op, PKey: 0xffff, DestQP: 0x48, PSN: tc.LastFinished},
			Headers:      HasTCAETH,
			AETH:         ACK(CreditInvalid, 3),
			TCAETH:       tc,
			AtomicAckETH: AtomicAckETH{OrigRemData: 42},
		}
		b, err := p.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != c.length || p.Len() != c.length {
			t.Fatalf("%v extended: %d octets (Len %d), want %d", c.op, len(b), p.Len(), c.length)
		}
		// The T/C AETH sits right after the AETH.
		if !bytes.Equal(b[16:19], []byte{0, 0, 3}) || !bytes.Equal(b[19:22], []byte{0, 0, 199}) {
			t.Errorf("%v: T/C AETH not after the AETH: % x", c.op, b[12:48])
		}
		if err := v4Flow.Seal(b); err != nil {
			t.Fatal(err)
		}
		back, err := ParsePacket(b)
		if err != nil {
			t.Fatal(err)
		}
		if !back.Has(HasTCAETH) || back.TCAETH != tc || back.AETH != p.AETH || uint32(back.BTH.PSN) != uint32(tc.LastFinished) {
			t.Errorf("%v: parsed %+v", c.op, back)
		}
		if c.op == OpAtomicAcknowledge && back.AtomicAckETH.OrigRemData != 42 {
			t.Errorf("AtomicAckETH after the T/C AETH lost: %+v", back.AtomicAckETH)
		}
		// Without HasTCAETH the same packet is the plain IBTA form.
		p.Headers = 0
		plain, _ := p.Append(nil)
		if len(plain) != c.length-TCAETHLen {
			t.Errorf("%v plain: %d octets", c.op, len(plain))
		}
		if back, err := ParsePacket(plain); err != nil || back.Has(HasTCAETH) {
			t.Errorf("%v plain parses as extended %v: %v", c.op, back.Has(HasTCAETH), err)
		}
	}
	// A T/C AETH is never added to other opcodes.
	p := Packet{BTH: BTH{OpCode: OpSendOnly}, Headers: HasTCAETH, TCAETH: tc}
	if b, _ := p.Append(nil); len(b) != BTHLen+ICRCLen {
		t.Errorf("SEND_ONLY with HasTCAETH: %d octets", len(b))
	}
	// An ACK whose T/C AETH breaks T3 is refused.
	bad := Packet{BTH: BTH{OpCode: OpAcknowledge}, Headers: HasTCAETH, TCAETH: TCAETH{NumSegs: 1, Segs: [3]Segment{{0, 0}}}}
	if _, err := bad.Append(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad T/C AETH: %v", err)
	}
}

// Section 5: malformed packets are refused with errors that say why, and the BTH is kept so a
// caller can still name the packet.
func TestPacketMalformedSection5(t *testing.T) {
	ack := samplePacket(OpAcknowledge, nil)
	good, _ := ack.Append(nil)
	send := samplePacket(OpSendOnly, []byte{1, 2, 3, 4, 5})
	sendB, _ := send.Append(nil)
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"BTH and ICRC not whole", good[:15], ErrShort},
		{"ACK without its AETH", append(append([]byte{}, good[:12]...), 0, 0, 0, 0), ErrShort},
		{"ACK with stray octets", append(append([]byte{}, good[:16]...), 9, 9, 9, 9, 0, 0, 0, 0), ErrInvalid},
		{"undefined opcode", append([]byte{0x15}, good[1:]...), ErrUnknownOpcode},
		{"pad longer than the payload", func() []byte {
			b := append([]byte{}, sendB[:12]...)
			b[1] |= 0x30
			return append(b, 1, 0, 0, 0, 0)
		}(), ErrInvalid},
	}
	for _, c := range cases {
		p, err := ParsePacket(c.b)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if len(c.b) >= BTHLen+ICRCLen && p.BTH.OpCode != Opcode(c.b[0]) {
			t.Errorf("%s: BTH not kept on error", c.name)
		}
	}
	if _, err := (&Packet{BTH: BTH{OpCode: OpAcknowledge}, Payload: []byte{1}}).Append(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("ACK with payload: %v", err)
	}
	if b, err := (&Packet{BTH: BTH{OpCode: 0x15}}).Append([]byte{7}); !errors.Is(err, ErrUnknownOpcode) || len(b) != 1 {
		t.Errorf("undefined opcode append: %v, %d octets", err, len(b))
	}
	if b, err := (&Packet{BTH: BTH{OpCode: OpSendOnly, DestQP: 1 << 24}}).Append([]byte{7}); !errors.Is(err, ErrInvalid) || len(b) != 1 {
		t.Errorf("bad BTH append: %v, %d octets", err, len(b))
	}
}

// RULINGS C12 for IPv6: a packet sealed under an IPv6 header verifies; traffic class, flow
// label and hop limit may change on the way; everything else covered may not; and each IPv6
// mask is needed.
func TestICRCIPv6C12(t *testing.T) {
	p := samplePacket(OpWriteFirst, bytes.Repeat([]byte{0xc3}, 333))
	pkt, _ := p.Append(nil)
	hdr, err := v6Flow.AppendIPUDP(nil, len(pkt))
	if err != nil {
		t.Fatal(err)
	}
	ip, udp := hdr[:40], hdr[40:]
	// A real path sets DSCP/ECN, a flow label and decrements the hop limit.
	ip[0], ip[1], ip[2], ip[3], ip[7] = 0x6b, 0x81, 0x23, 0x45, 17
	udp[6], udp[7] = 0x12, 0x34
	if err := SealICRC(ip, udp, pkt); err != nil {
		t.Fatal(err)
	}
	if err := VerifyICRC(ip, udp, pkt); err != nil {
		t.Fatal(err)
	}
	// The logical header gives the same ICRC: it differs only in masked fields.
	if err := v6Flow.Verify(pkt); err != nil {
		t.Errorf("logical IPv6 header: %v", err)
	}
	all := append(append(clone(ip), udp...), pkt...)
	ip, udp, pkt = all[:40], all[40:48], all[48:]
	masked := func(i int) bool {
		switch {
		case i == 0:
			return false // the version nibble is covered; the TC nibble is checked below
		case i < 4 || i == 7:
			return true
		case i < 40:
			return false
		case i < 48:
			return i >= 46
		}
		return i == 48+4
	}
	for i := range all {
		for j := range 8 {
			all[i] ^= 1 << j
			err := VerifyICRC(ip, udp, pkt)
			all[i] ^= 1 << j
			m := masked(i) || i == 0 && j < 4
			if m != (err == nil) {
				t.Fatalf("octet %d bit %d: masked %v, verify %v", i, j, m, err)
			}
		}
	}
	for _, m := range []mask{maskTrafficClass, maskFlowLabel, maskHopLimit, maskUDPChecksum, maskBTHResv8, maskPrefix} {
		if err := verify(ip, udp, pkt, maskAll&^m); !errors.Is(err, ErrICRC) {
			t.Errorf("without mask %#x: %v, want a mismatch", m, err)
		}
	}
}

// RULINGS C12: the logical header is IPv4 with DF and Identification 0 (or IPv6), destination
// port 4791 unless told otherwise, lengths from the packet, a correct IPv4 checksum.
func TestLogicalHeaderC12(t *testing.T) {
	hdr, err := v4Flow.AppendIPUDP(nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := mustHex(t, "4500"+"0080"+"0000"+"4000"+"4011"+"0000"+"c0a84604"+"c0a84606"+"c001"+"12b7"+"006c"+"0000")
	c := ipv4Checksum(want[:20])
	want[10], want[11] = byte(c>>8), byte(c)
	if !bytes.Equal(hdr, want) {
		t.Errorf("IPv4 logical header\n% x\nwant\n% x", hdr, want)
	}
	if ipv4Checksum(hdr[:20]) != 0 {
		t.Error("IPv4 header checksum does not check")
	}
	h6, _ := v6Flow.AppendIPUDP(nil, 100)
	if len(h6) != 48 || h6[0] != 0x60 || h6[4] != 0 || h6[5] != 108 || h6[6] != 17 || h6[42] != 0x12 || h6[43] != 0xb7 {
		t.Errorf("IPv6 logical header % x", h6)
	}
	other := v4Flow
	other.DstPort = 5000
	if h, _ := other.AppendIPUDP(nil, 0); h[22] != 0x13 || h[23] != 0x88 {
		t.Errorf("explicit destination port: % x", h[20:])
	}
	mapped := v4Flow
	mapped.Src = netip.AddrFrom16(v4Flow.Src.As16())
	if h, err := mapped.AppendIPUDP(nil, 0); err != nil || len(h) != 28 {
		t.Errorf("IPv4-mapped source: %v", err)
	}
	for _, bad := range []LogicalHeader{{Src: v4Flow.Src, Dst: v6Flow.Dst}, {}} {
		if _, err := bad.AppendIPUDP(nil, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := v4Flow.AppendIPUDP(nil, 70000); !errors.Is(err, ErrInvalid) {
		t.Errorf("oversized: %v", err)
	}
	// Different flows give different ICRCs for the same packet.
	p := samplePacket(OpSendOnly, []byte("data"))
	pkt, _ := p.Append(nil)
	a, _ := v4Flow.ICRC(pkt[:len(pkt)-4])
	moved := v4Flow
	moved.SrcPort++
	b, _ := moved.ICRC(pkt[:len(pkt)-4])
	if a == b {
		t.Error("the UDP source port is not covered")
	}
}

// Section 5: malformed input to the ICRC functions is an error, never a panic or a verdict.
func TestICRCMalformedInputSection5(t *testing.T) {
	pkt := make([]byte, 20)
	ip4, _ := v4Flow.AppendIPUDP(nil, len(pkt))
	ip, udp := ip4[:20], ip4[20:]
	for _, c := range []struct {
		name         string
		ip, udp, pkt []byte
	}{
		{"no IP header", nil, udp, pkt},
		{"IPv4 shorter than IHL", ip[:19], udp, pkt},
		{"IPv4 longer than IHL", append(clone(ip), 0), udp, pkt},
		{"IPv6 too short", append([]byte{0x60}, make([]byte, 30)...), udp, pkt},
		{"IP version 5", append([]byte{0x50}, ip[1:]...), udp, pkt},
		{"short UDP header", ip, udp[:7], pkt},
		{"packet without BTH", ip, udp, pkt[:15]},
	} {
		err := VerifyICRC(c.ip, c.udp, c.pkt)
		if err == nil || errors.Is(err, ErrICRC) {
			t.Errorf("%s: %v, want a malformed-input error", c.name, err)
		}
		if err := SealICRC(c.ip, c.udp, c.pkt); err == nil {
			t.Errorf("%s: sealed", c.name)
		}
	}
	if _, err := CarriedICRC(make([]byte, 15)); !errors.Is(err, ErrShort) {
		t.Errorf("CarriedICRC of 15 octets: %v", err)
	}
}
