package wire

import (
	"net/netip"
	"testing"
)

// HELLO carries the flow descriptor with IPv4 or IPv6 addresses per AF; HELLO_ACK the same first
// twelve octets, the echoed nonce and Max Open Blocks. Exact octets, both families.
func TestHelloLayoutIPv4AndIPv6(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Hello
		want string
	}{
		{"IPv4", Hello{Capabilities: caps(), SenderNonce: 0x0123456789abcdef, Source: v4src, Destination: v4dst, FlowLabel: 0x000011},
			"12 00 0028 00000000" + "01 04 0007" + "40 10 1022" + "1000 0000" + "0123456789abcdef" +
				"c000020a" + "c6336414" + "00000011"},
		{"IPv6", Hello{Capabilities: caps(), SenderNonce: 1, Source: v6src, Destination: v6dst, FlowLabel: 0xab0000ff},
			"12 00 0040 00000000" + "01 06 0007" + "40 10 1022" + "1000 0000" + "0000000000000001" +
				"20010db8000000000000000000000010" + "20010db8000100000000000000000020" + "ab0000ff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.want)
			if got := mustAppend(t, &tc.m); string(got) != string(want) {
				t.Fatalf("Append =\n %x\nwant\n %x", got, want)
			}
			got, err := ParseHello(want)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.m {
				t.Fatalf("ParseHello =\n %+v\nwant\n %+v", got, tc.m)
			}
			if got.DestQP() != tc.m.FlowLabel&0xffffff {
				t.Fatalf("DestQP %#x", got.DestQP())
			}
		})
	}
}

func TestHelloAckLayoutAndNoAmplification(t *testing.T) {
	for _, af := range []AF{AF4, AF6} {
		m := HelloAck{FlowID: 0x5eed, Capabilities: caps(), AF: af, SenderNonce: 0x0123456789abcdef, MaxOpenBlocks: 64}
		want := unhex(t, "13 00 0020 00005eed"+"01 0"+string('0'+byte(af))+" 0007"+"40 10 1022"+"1000 0000"+"0123456789abcdef"+"0040 0000")
		if got := mustAppend(t, &m); string(got) != string(want) {
			t.Fatalf("%v: Append =\n %x\nwant\n %x", af, got, want)
		}
		got, err := ParseHelloAck(want)
		if err != nil || got != m {
			t.Fatalf("%v: ParseHelloAck = %+v, %v", af, got, err)
		}
	}
	// Security Considerations: HELLO_ACK is never larger than HELLO, so no amplification.
	hello := Hello{Capabilities: caps(), Source: v4src, Destination: v4dst}
	if ack := (&HelloAck{}).Length(); ack > hello.Length() {
		t.Fatalf("HELLO_ACK %d octets > smallest HELLO %d", ack, hello.Length())
	}
}

// An IPv4-mapped IPv6 address travels as IPv6 (AF 6) and comes back unchanged.
func TestHelloIPv4MappedStaysIPv6(t *testing.T) {
	m := Hello{Capabilities: caps(), Source: netip.MustParseAddr("::ffff:192.0.2.1"), Destination: v6dst}
	b := mustAppend(t, &m)
	if b[9] != 6 || len(b) != 64 {
		t.Fatalf("AF %d length %d, want 6 and 64", b[9], len(b))
	}
	got, err := ParseHello(b)
	if err != nil || got != m {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestHelloMalformedFields(t *testing.T) {
	v4 := mustAppend(t, &Hello{Capabilities: caps(), Source: v4src, Destination: v4dst})
	v6 := mustAppend(t, &Hello{Capabilities: caps(), Source: v6src, Destination: v6dst})
	ack := mustAppend(t, &HelloAck{Capabilities: caps(), AF: AF4, MaxOpenBlocks: 1})
	for _, tc := range []struct {
		name  string
		b     []byte
		typ   Type
		field string
	}{
		{"Flow ID nonzero in HELLO", edit(v4, set(7, 1)), TypeHello, "Flow ID"},
		{"AF 5", edit(v4, set(9, 5)), TypeHello, "AF"},
		{"AF 0", edit(v6, set(9, 0)), TypeHello, "AF"},
		{"AF 6 on IPv4 addresses", edit(v4, set(9, 6)), TypeHello, "Source Address"},
		{"AF 4 on IPv6 addresses", edit(v6, set(9, 4)), TypeHello, "Length"},
		{"Max k 0", edit(v4, set(12, 0)), TypeHello, "Max k"},
		{"Max T 1", edit(v4, set(14, 0, 1)), TypeHello, "Max T"},
		{"RDMA MTU 0", edit(v4, set(16, 0, 0)), TypeHello, "RDMA MTU"},
		{"Flow Label cut", edit(v4, cut(2)), TypeHello, "Flow Label"},
		{"HELLO_ACK AF 5", edit(ack, set(9, 5)), TypeHelloAck, "AF"},
		{"HELLO_ACK Max Open Blocks 0", edit(ack, set(28, 0, 0)), TypeHelloAck, "Max Open Blocks"},
		{"HELLO_ACK Max k 0", edit(ack, set(12, 0)), TypeHelloAck, "Max k"},
		{"HELLO_ACK with addresses appended", edit(ack, grow(1, 2, 3, 4)), TypeHelloAck, "Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.b)
			wantFieldError(t, err, tc.typ, tc.field)
		})
	}
}

func TestHelloAppendValidatesAddresses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst netip.Addr
		field    string
	}{
		{"unset source", netip.Addr{}, v4dst, "Source Address"},
		{"mixed families", v4src, v6dst, "Destination Address"},
		{"zone", netip.MustParseAddr("fe80::1%eth0"), v6dst, "Source Address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&Hello{Capabilities: caps(), Source: tc.src, Destination: tc.dst}).Append(nil)
			wantFieldError(t, err, TypeHello, tc.field)
			_, err = (&PathReport{Source: tc.src, Destination: tc.dst}).Append(nil)
			wantFieldError(t, err, TypePathReport, tc.field)
		})
	}
}
