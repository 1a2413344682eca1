package rc

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"
)

func sampleSetup() SetupMsg {
	return SetupMsg{Type: SetupRequest, Nonce: 0x0102030405060708, QPN: 0x123456, StartPSN: 0xabcdef,
		MTU: 1024, Mode: ModeTCAETH, TCAETH: true, Rate: 1e9, RTT: 20 * time.Millisecond,
		DataPort: 4791, FlowPort: 49152, RequesterAddr: netip.MustParseAddr("192.0.2.1"),
		ResponderAddr: netip.MustParseAddr("192.0.2.2"), App: []byte("perf")}
}

// The setup exchange's messages survive a round trip, and each rule rejects what breaks it.
func TestSetupRoundTripAndRules(t *testing.T) {
	m := sampleSetup()
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != m.Len() || len(b) != SetupHeaderLen+4 {
		t.Fatalf("length %d", len(b))
	}
	got, n, err := ParseSetup(b)
	if err != nil || n != len(b) {
		t.Fatalf("parse: %v, %d", err, n)
	}
	if got.QPN != m.QPN || got.StartPSN != m.StartPSN || got.Mode != m.Mode || !got.TCAETH || got.Rate != m.Rate ||
		got.RTT != m.RTT || got.DataPort != 4791 || got.FlowPort != 49152 || got.RequesterAddr != m.RequesterAddr ||
		got.ResponderAddr != m.ResponderAddr || string(got.App) != "perf" || got.Nonce != m.Nonce {
		t.Fatalf("round trip: %+v", got)
	}
	bad := []func(m *SetupMsg){
		func(m *SetupMsg) { m.TCAETH = false },     // T2: flag and mode agree
		func(m *SetupMsg) { m.Mode = ModeGBN },     // likewise
		func(m *SetupMsg) { m.MTU = 1000 },         // MTU 256..4096, powers of two
		func(m *SetupMsg) { m.QPN = 1 << 24 },      // 24-bit QPN
		func(m *SetupMsg) { m.QPN = 1 },            // QP 1 is special
		func(m *SetupMsg) { m.StartPSN = 1 << 24 }, // 24-bit PSN
		func(m *SetupMsg) { m.Mode, m.TCAETH, m.SRNoNAK = ModeGBN, false, true },
		func(m *SetupMsg) { m.ResponderAddr = netip.MustParseAddr("2001:db8::1") },
		func(m *SetupMsg) { m.App = make([]byte, SetupMaxApp+1) },
		func(m *SetupMsg) { m.Type = 9 },
	}
	for i, f := range bad {
		x := sampleSetup()
		f(&x)
		if _, err := x.Append(nil); !errors.Is(err, ErrSetup) {
			t.Errorf("case %d: Append accepted %+v", i, x)
		}
	}
	for cut := range len(b) {
		if _, _, err := ParseSetup(b[:cut]); err == nil {
			t.Errorf("parse accepted %d of %d octets", cut, len(b))
		}
	}
	b[23] |= 0x80
	if _, _, err := ParseSetup(b); err == nil {
		t.Error("parse accepted reserved flags")
	}
	r := SetupMsg{Type: SetupReject, Nonce: 9, App: []byte("busy")}
	rb, err := r.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := ParseSetup(rb); err != nil || string(got.App) != "busy" {
		t.Fatalf("reject: %v %+v", err, got)
	}
}

// FuzzParseSetup: no input panics the parser, and whatever parses encodes back to the same
// octets.
func FuzzParseSetup(f *testing.F) {
	m := sampleSetup()
	b, _ := m.Append(nil)
	f.Add(b)
	r := SetupMsg{Type: SetupResult, App: []byte(`{"verified":true}`)}
	rb, _ := r.Append(nil)
	f.Add(rb)
	f.Add([]byte("RC"))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, n, err := ParseSetup(in)
		if err != nil {
			return
		}
		out, err := m.Append(nil)
		if err != nil {
			t.Fatalf("parsed %x but cannot encode: %v", in[:n], err)
		}
		if !bytes.Equal(out, in[:n]) {
			t.Fatalf("round trip: %x -> %x", in[:n], out)
		}
	})
}
