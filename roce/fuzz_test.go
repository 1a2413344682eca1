package roce

import (
	"bytes"
	"errors"
	"testing"
)

// seedPackets adds the real capture's packets (when present) and one packet of every parseable
// opcode to a fuzz corpus.
func seedPackets(f *testing.F) {
	if path, err := findCapture(); err == nil {
		for _, rp := range readRoCE(f, path) {
			f.Add(rp.pkt)
		}
	}
	for op := range Opcode(0xff) {
		if !op.Info().Known {
			continue
		}
		p := samplePacket(op, []byte("abcdefg"))
		b, _ := p.Append(nil)
		f.Add(b)
	}
	ext := Packet{BTH: BTH{OpCode: OpAcknowledge}, Headers: HasTCAETH,
		TCAETH: TCAETH{LastFinished: 199, NumSegs: 2, Segs: [3]Segment{{300, 399}, {500, 599}}}}
	b, _ := ext.Append(nil)
	f.Add(b)
}

// Section 5: the packet view never panics; what it accepts adds up to the input, re-encodes to
// the same octets when the input was canonical (minimal zero pad; T/C AETH ignored fields zero),
// and parses back the same.
func FuzzParsePacket(f *testing.F) {
	seedPackets(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePacket(b)
		if err != nil {
			return
		}
		pad := int(p.BTH.PadCount)
		if p.HeaderLen()+len(p.Payload)+pad+ICRCLen != len(b) {
			t.Fatalf("parts add up to %d, input %d", p.HeaderLen()+len(p.Payload)+pad+ICRCLen, len(b))
		}
		out, err := p.Append(nil)
		if err != nil {
			t.Fatalf("a parsed packet does not encode: %v", err)
		}
		padOctets := b[len(b)-ICRCLen-pad : len(b)-ICRCLen]
		if pad == PadLen(len(p.Payload)) && bytes.Count(padOctets, []byte{0}) == pad {
			want := b
			if p.Has(HasTCAETH) {
				// Unused Seg fields, reserved fields and padding of a T/C AETH are ignored
				// on receipt and written as zero (T1).
				want = clone(b)
				copy(want[BTHLen+AETHLen:BTHLen+AETHLen+TCAETHLen], out[BTHLen+AETHLen:])
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("re-encoded\n% x\ninput\n% x", out, b)
			}
		}
		back, err := ParsePacket(out)
		if err != nil {
			t.Fatalf("re-encoded packet does not parse: %v", err)
		}
		back.BTH.PadCount, p.BTH.PadCount = 0, 0
		if !bytes.Equal(back.Payload, p.Payload) || back.BTH != p.BTH || back.Headers != p.Headers ||
			back.AETH != p.AETH || back.TCAETH != p.TCAETH || back.RETH != p.RETH || back.ICRC != p.ICRC {
			t.Fatalf("parses back to\n%+v\nwant\n%+v", back, p)
		}
	})
}

// fuzzHeader checks one header parser: never a panic, n within the input, and the encoding of
// what it read equals the octets it read (exact for every header but the T/C AETH, whose
// reserved octets and unused fields are ignored; there the re-parse must agree).
func fuzzHeader[H interface {
	comparable
	Append([]byte) ([]byte, error)
}](f *testing.F, exact bool, parse func([]byte) (H, int, error), seeds ...[]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := parse(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with n=%d", err, n)
			}
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("read %d of %d octets", n, len(b))
		}
		out, err := h.Append(nil)
		if err != nil {
			t.Fatalf("%+v does not encode: %v", h, err)
		}
		if len(out) != n {
			t.Fatalf("encodes to %d octets, read %d", len(out), n)
		}
		if exact && !bytes.Equal(out, b[:n]) {
			t.Fatalf("encodes to % x, read % x", out, b[:n])
		}
		back, _, err := parse(out)
		if err != nil || back != h {
			t.Fatalf("parses back to %+v (%v), want %+v", back, err, h)
		}
	})
}

// realHeaders returns, for each packet of the real capture (read in place; none where the
// shared test data is absent) whose opcode carries the part has, the octets from its BTH's end
// (from the start with has 0): the header parsers' seeds.
func realHeaders(f *testing.F, has Headers, seeds ...[]byte) [][]byte {
	path, err := findCapture()
	if err != nil {
		f.Logf("real capture not used: %v", err)
		return seeds
	}
	for _, rp := range readRoCE(f, path) {
		switch op := Opcode(rp.pkt[0]); {
		case has == 0:
			seeds = append(seeds, rp.pkt)
		case op.Info().Headers&has == has && len(rp.pkt) > BTHLen:
			seeds = append(seeds, rp.pkt[BTHLen:])
		}
	}
	return seeds
}

func FuzzBTH(f *testing.F) {
	fuzzHeader(f, true, ParseBTH, realHeaders(f, 0, []byte("\x11\x40\xff\xff\x00\x00\x00\x45\x00\x00\x00\x00"))...)
}

func FuzzRETH(f *testing.F) { fuzzHeader(f, true, ParseRETH, make([]byte, RETHLen)) }

func FuzzAETH(f *testing.F) {
	fuzzHeader(f, true, ParseAETH, realHeaders(f, HasAETH, []byte{0x60, 0, 0, 1})...)
}

func FuzzAtomicETH(f *testing.F) { fuzzHeader(f, true, ParseAtomicETH, make([]byte, AtomicETHLen)) }

func FuzzAtomicAckETH(f *testing.F) {
	fuzzHeader(f, true, ParseAtomicAckETH, make([]byte, AtomicAckETHLen))
}

func FuzzImmDt(f *testing.F) {
	fuzzHeader(f, true, ParseImmDt, realHeaders(f, HasImmDt, []byte{1, 2, 3, 4})...)
}

func FuzzIETH(f *testing.F) { fuzzHeader(f, true, ParseIETH, []byte{1, 2, 3, 4}) }

func FuzzDETH(f *testing.F) { fuzzHeader(f, true, ParseDETH, make([]byte, DETHLen)) }

// RULINGS T1, T3: the T/C AETH parser never panics and accepts only what its encoder writes.
func FuzzTCAETH(f *testing.F) {
	tc := TCAETH{LastFinished: 199, NumSegs: 2, Segs: [3]Segment{{300, 399}, {500, 599}}}
	draft, _ := tc.Append(nil)
	fuzzHeader(f, false, ParseTCAETH, draft, make([]byte, TCAETHLen))
}

// RULINGS C12: the ICRC functions never panic on any IP header, UDP header and packet; what
// they seal verifies, and a changed ICRC does not.
func FuzzICRC(f *testing.F) {
	pkt := samplePacket(OpSendOnly, []byte("hello"))
	b, _ := pkt.Append(nil)
	h4, _ := v4Flow.AppendIPUDP(nil, len(b))
	h6, _ := v6Flow.AppendIPUDP(nil, len(b))
	f.Add(h4[:20], h4[20:], b)
	f.Add(h6[:40], h6[40:], b)
	if path, err := findCapture(); err == nil {
		for _, rp := range readRoCE(f, path) {
			f.Add(rp.ip, rp.udp, rp.pkt)
		}
	} else {
		f.Logf("real capture not used: %v", err)
	}
	f.Fuzz(func(t *testing.T, ip, udp, pkt []byte) {
		// The fuzzer may hand out arguments that share memory; sealing writes into pkt.
		ip, udp, pkt = clone(ip), clone(udp), clone(pkt)
		err := SealICRC(ip, udp, pkt)
		if err != nil {
			if VerifyICRC(ip, udp, pkt) == nil {
				t.Fatal("verifies what it cannot seal")
			}
			return
		}
		if err := VerifyICRC(ip, udp, pkt); err != nil {
			t.Fatalf("sealed packet does not verify: %v", err)
		}
		pkt[len(pkt)-1] ^= 0x80
		if err := VerifyICRC(ip, udp, pkt); !errors.Is(err, ErrICRC) {
			t.Fatalf("changed ICRC: %v", err)
		}
	})
}
