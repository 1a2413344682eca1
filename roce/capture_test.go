package roce

import (
	"errors"
	"testing"
)

// The real capture: 105 RoCEv2 packets between two hardware RoCE NICs
// (../shared/testdata/roce/README.md).
const (
	capturePackets = 105
	captureMTU     = 1024
)

// Section 5: every RoCEv2 packet of the real capture parses, with the opcode mix the README
// states, and the headers are consistent with what the NICs sent.
func TestCaptureParsesSection5(t *testing.T) {
	pkts := readRoCE(t, realCapture(t))
	if len(pkts) != capturePackets {
		t.Fatalf("found %d RoCEv2 packets, want %d", len(pkts), capturePackets)
	}
	counts := map[Opcode]int{}
	for _, rp := range pkts {
		p, err := ParsePacket(rp.pkt)
		if err != nil {
			t.Fatalf("frame %d: %v", rp.frame, err)
		}
		counts[p.BTH.OpCode]++
		if p.BTH.TVer != 0 || p.BTH.PKey != 0xffff {
			t.Errorf("frame %d: TVer %d P_Key %#x, want 0 and the default partition 0xffff", rp.frame, p.BTH.TVer, p.BTH.PKey)
		}
		if p.HeaderLen()+len(p.Payload)+int(p.BTH.PadCount)+ICRCLen != len(rp.pkt) {
			t.Errorf("frame %d: parts add up to %d octets, packet has %d", rp.frame,
				p.HeaderLen()+len(p.Payload)+int(p.BTH.PadCount)+ICRCLen, len(rp.pkt))
		}
		switch p.BTH.OpCode {
		case OpSendFirst:
			// Not the last packet: a full RDMA MTU of payload and no pad.
			if len(p.Payload) != captureMTU || p.BTH.PadCount != 0 {
				t.Errorf("frame %d: SEND_FIRST payload %d pad %d, want %d and 0", rp.frame, len(p.Payload), p.BTH.PadCount, captureMTU)
			}
		case OpAcknowledge:
			if p.AETH.Type() != AckTypeACK || p.Has(HasTCAETH) {
				t.Errorf("frame %d: ACKNOWLEDGE with %v, T/C AETH %v", rp.frame, p.AETH, p.Has(HasTCAETH))
			}
		case OpSendLastWithImmediate, OpSendOnlyWithImmediate:
			if !p.BTH.AckReq || len(p.Payload) == 0 {
				t.Errorf("frame %d: last packet of a message without AckReq or payload", rp.frame)
			}
		}
	}
	want := map[Opcode]int{OpSendFirst: 33, OpSendLastWithImmediate: 33, OpSendOnlyWithImmediate: 2, OpAcknowledge: 37}
	for op, n := range want {
		if counts[op] != n {
			t.Errorf("%v: %d packets, want %d", op, counts[op], n)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("opcodes seen: %v, want only %v", counts, want)
	}
}

// RULINGS C12: every packet of the real capture carries a correct ICRC.
func TestICRCCaptureC12(t *testing.T) {
	pkts := readRoCE(t, realCapture(t))
	if len(pkts) != capturePackets {
		t.Fatalf("found %d RoCEv2 packets, want %d", len(pkts), capturePackets)
	}
	for _, rp := range pkts {
		if err := VerifyICRC(rp.ip, rp.udp, rp.pkt); err != nil {
			t.Errorf("frame %d: %v", rp.frame, err)
		}
		c, err := ICRC(rp.ip, rp.udp, rp.pkt[:len(rp.pkt)-ICRCLen])
		carried, _ := CarriedICRC(rp.pkt)
		if err != nil || c != carried {
			t.Errorf("frame %d: ICRC computes %#08x (%v), carried %#08x", rp.frame, c, err, carried)
		}
	}
}

// RULINGS C12: the relay's logical header (endpoint addresses, the flow's source port, 4791,
// DF and Identification 0) yields the same ICRC as the real header, because the NICs send
// exactly that.
func TestLogicalHeaderMatchesCaptureC12(t *testing.T) {
	for _, rp := range readRoCE(t, realCapture(t)) {
		h := LogicalHeader{Src: rp.src.Addr(), Dst: rp.dst.Addr(), SrcPort: rp.src.Port()}
		if err := h.Verify(rp.pkt); err != nil {
			t.Errorf("frame %d: logical header %+v: %v", rp.frame, h, err)
		}
	}
}

// maskedBit reports whether bit (octet i, bit j) of the concatenation ip||udp||pkt lies in a
// field the ICRC masks for IPv4: TOS, TTL, header checksum, UDP checksum, BTH octet 4.
func maskedBit(ipLen, i int) bool {
	switch {
	case i < ipLen:
		return i == 1 || i == 8 || i == 10 || i == 11
	case i < ipLen+8:
		return i-ipLen >= 6
	}
	return i-ipLen-8 == 4
}

// RULINGS C12 and section 5: flipping any one covered bit of any packet (IP header, UDP header,
// BTH, extension headers, payload, pad or the ICRC itself) fails verification; flipping a bit of
// a masked field (TOS, TTL, IPv4 checksum, UDP checksum, BTH octet 4) still verifies.
func TestICRCBitFlipsC12(t *testing.T) {
	pkts := readRoCE(t, realCapture(t))
	covered, masked := 0, 0
	for _, rp := range pkts {
		all := append(append(clone(rp.ip), rp.udp...), rp.pkt...)
		ip, udp, pkt := all[:len(rp.ip)], all[len(rp.ip):len(rp.ip)+8], all[len(rp.ip)+8:]
		for i := range all {
			for j := range 8 {
				all[i] ^= 1 << j
				err := VerifyICRC(ip, udp, pkt)
				all[i] ^= 1 << j
				if maskedBit(len(ip), i) {
					masked++
					if err != nil {
						t.Fatalf("frame %d: flipping masked octet %d bit %d: %v", rp.frame, i, j, err)
					}
				} else {
					covered++
					if err == nil {
						t.Fatalf("frame %d: flipping covered octet %d bit %d still verifies", rp.frame, i, j)
					}
				}
			}
		}
	}
	t.Logf("%d covered bit flips all failed, %d masked bit flips all verified", covered, masked)
}

// RULINGS C12: each mask is needed. With any one of the IPv4 rules left out (the 0xFF prefix,
// TOS, TTL, header checksum, UDP checksum, BTH octet 4), not one packet of the real capture
// verifies.
func TestICRCEveryMaskNeededC12(t *testing.T) {
	pkts := readRoCE(t, realCapture(t))
	for _, c := range []struct {
		name string
		m    mask
	}{
		{"eight 0xFF octets", maskPrefix}, {"IPv4 TOS", maskTOS}, {"IPv4 TTL", maskTTL},
		{"IPv4 header checksum", maskIPChecksum}, {"UDP checksum", maskUDPChecksum},
		{"BTH octet 4", maskBTHResv8},
	} {
		ok := 0
		for _, rp := range pkts {
			err := verify(rp.ip, rp.udp, rp.pkt, maskAll&^c.m)
			if err == nil {
				ok++
			} else if !errors.Is(err, ErrICRC) {
				t.Fatalf("frame %d: %v", rp.frame, err)
			}
		}
		if ok != 0 {
			t.Errorf("without the %s mask %d of %d packets verify, want none", c.name, ok, len(pkts))
		}
	}
}

// The parse and ICRC hot paths do not allocate.
func TestParseAndICRCAllocateNothing(t *testing.T) {
	pkts := readRoCE(t, realCapture(t))
	rp := pkts[2]
	h := LogicalHeader{Src: rp.src.Addr(), Dst: rp.dst.Addr(), SrcPort: rp.src.Port()}
	for name, f := range map[string]func(){
		"ParsePacket": func() {
			if _, err := ParsePacket(rp.pkt); err != nil {
				t.Fatal(err)
			}
		},
		"VerifyICRC": func() {
			if err := VerifyICRC(rp.ip, rp.udp, rp.pkt); err != nil {
				t.Fatal(err)
			}
		},
		"LogicalHeader.Verify": func() {
			if err := h.Verify(rp.pkt); err != nil {
				t.Fatal(err)
			}
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", name, n)
		}
	}
}
