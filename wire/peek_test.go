package wire

import (
	"net/netip"
	"testing"
)

// peekAgrees fails unless every peek that applies to b agrees with what the parser finds, when
// the parser accepts b; a datagram the parser refuses may peek either way, but must not panic.
func peekAgrees(t *testing.T, b []byte) {
	t.Helper()
	hello, helloOK := PeekHelloFlow(b)
	nonce, nonceOK := PeekHelloAckNonce(b)
	report, reportOK := PeekPathReportFlow(b)
	id, idOK := PeekFlowID(b)
	m, err := Parse(b)
	if err != nil {
		return
	}
	if !idOK {
		t.Fatalf("PeekFlowID refused a message Parse takes: % x", b)
	}
	switch v := m.(type) {
	case *Hello:
		want := FlowName{Source: v.Source, Destination: v.Destination, FlowLabel: v.FlowLabel}
		if !helloOK || hello != want || id != 0 {
			t.Fatalf("PeekHelloFlow = %+v, %v; ParseHello = %+v", hello, helloOK, want)
		}
	case *HelloAck:
		if !nonceOK || nonce != v.SenderNonce || id != v.FlowID {
			t.Fatalf("PeekHelloAckNonce = %#x, %v (Flow ID %d); ParseHelloAck = %#x (Flow ID %d)", nonce, nonceOK, id, v.SenderNonce, v.FlowID)
		}
	case *PathReport:
		want := FlowName{Source: v.Source, Destination: v.Destination, FlowLabel: v.FlowLabel}
		if !reportOK || report != want {
			t.Fatalf("PeekPathReportFlow = %+v, %v; ParsePathReport = %+v", report, reportOK, want)
		}
	}
	if m.Type() != TypeHello && helloOK || m.Type() != TypeHelloAck && nonceOK || m.Type() != TypePathReport && reportOK {
		t.Fatalf("a peek of another type accepted a %v", m.Type())
	}
}

// TestPeeksAgreeWithTheParsers: the fields a router reads at fixed offsets are those the
// parsers find, for every seed message of both address families.
func TestPeeksAgreeWithTheParsers(t *testing.T) {
	seeds := seedBytes(t, 0)
	for _, m := range []Message{
		&Hello{Capabilities: Capabilities{MaxK: 32, MaxT: 1100, RDMAMTU: 1024}, SenderNonce: 0x0123456789abcdef,
			Source: netip.MustParseAddr("2001:db8::1"), Destination: netip.MustParseAddr("2001:db8::2"), FlowLabel: 0xfedcba},
		&PathReport{Method: 3, Source: netip.MustParseAddr("2001:db8::1"), Destination: netip.MustParseAddr("2001:db8::2"), FlowLabel: 0x654321},
	} {
		seeds = append(seeds, mustAppend(t, m))
	}
	peeked := 0
	for _, b := range seeds {
		peekAgrees(t, b)
		if _, ok := PeekHelloFlow(b); ok {
			peeked++
		}
		if _, ok := PeekHelloAckNonce(b); ok {
			peeked++
		}
		if _, ok := PeekPathReportFlow(b); ok {
			peeked++
		}
	}
	if peeked < 4 {
		t.Fatalf("only %d seeds were HELLO, HELLO_ACK or PATH_REPORT: the test checks too little", peeked)
	}
}

// TestPeeksRefuseWhatTheyCannotRead: a short datagram, another Version or Type, or an AF that
// is neither 4 nor 6 peeks as false, never as a flow of zero addresses.
func TestPeeksRefuseWhatTheyCannotRead(t *testing.T) {
	hello := mustAppend(t, &Hello{Capabilities: Capabilities{MaxK: 32, MaxT: 1100, RDMAMTU: 1024}, SenderNonce: 7,
		Source: netip.MustParseAddr("192.0.2.1"), Destination: netip.MustParseAddr("192.0.2.2"), FlowLabel: 66})
	for n := range len(hello) {
		if _, ok := PeekHelloFlow(hello[:n]); ok {
			t.Fatalf("PeekHelloFlow took %d of a HELLO's %d octets", n, len(hello))
		}
	}
	badAF := append([]byte(nil), hello...)
	badAF[helloAFOff] = 5
	if _, ok := PeekHelloFlow(badAF); ok {
		t.Fatal("PeekHelloFlow took AF 5")
	}
	other := append([]byte(nil), hello...)
	other[0] = 2<<4 | uint8(TypeHello)
	if _, ok := PeekHelloFlow(other); ok {
		t.Fatal("PeekHelloFlow took Version 2")
	}
	if _, ok := PeekFlowID(other); ok {
		t.Fatal("PeekFlowID took Version 2")
	}
	if _, ok := PeekHelloAckNonce(hello); ok {
		t.Fatal("PeekHelloAckNonce took a HELLO")
	}
	if _, ok := PeekPathReportFlow(hello); ok {
		t.Fatal("PeekPathReportFlow took a HELLO")
	}
	if f, ok := PeekHelloFlow(hello); !ok || f.DestQP() != 66 || f.Source != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("PeekHelloFlow = %+v, %v", f, ok)
	}
}

// FuzzPeek: no datagram makes a peek panic, and a message the parser takes peeks as parsed.
func FuzzPeek(f *testing.F) {
	for _, b := range seedBytes(f, 0) {
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Fuzz(peekAgrees)
}
