package roce

import "testing"

// Section 5: the RC opcode table: name, the headers each opcode carries in order, request or
// response, and whether it takes a new PSN (RULINGS C13: ACKNOWLEDGE, ATOMIC ACKNOWLEDGE and
// CNP never do; READ responses do, in the reverse direction).
func TestOpcodeTableRCSection5(t *testing.T) {
	const P = HasPayload
	cases := []struct {
		op      Opcode
		name    string
		headers Headers
		request bool
		source  bool
	}{
		{0x00, "SEND_FIRST", P, true, true},
		{0x01, "SEND_MIDDLE", P, true, true},
		{0x02, "SEND_LAST", P, true, true},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", HasImmDt | P, true, true},
		{0x04, "SEND_ONLY", P, true, true},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", HasImmDt | P, true, true},
		{0x06, "RDMA_WRITE_FIRST", HasRETH | P, true, true},
		{0x07, "RDMA_WRITE_MIDDLE", P, true, true},
		{0x08, "RDMA_WRITE_LAST", P, true, true},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt | P, true, true},
		{0x0a, "RDMA_WRITE_ONLY", HasRETH | P, true, true},
		{0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt | P, true, true},
		{0x0c, "RDMA_READ_REQUEST", HasRETH, true, true},
		{0x0d, "RDMA_READ_RESPONSE_FIRST", HasAETH | P, false, true},
		{0x0e, "RDMA_READ_RESPONSE_MIDDLE", P, false, true},
		{0x0f, "RDMA_READ_RESPONSE_LAST", HasAETH | P, false, true},
		{0x10, "RDMA_READ_RESPONSE_ONLY", HasAETH | P, false, true},
		{0x11, "ACKNOWLEDGE", HasAETH, false, false},
		{0x12, "ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, false, false},
		{0x13, "COMPARE_SWAP", HasAtomicETH, true, true},
		{0x14, "FETCH_ADD", HasAtomicETH, true, true},
		{0x16, "SEND_LAST_WITH_INVALIDATE", HasIETH | P, true, true},
		{0x17, "SEND_ONLY_WITH_INVALIDATE", HasIETH | P, true, true},
		{0x81, "CNP", P, false, false},
	}
	seen := map[Opcode]bool{}
	for _, c := range cases {
		seen[c.op] = true
		info := c.op.Info()
		if !info.Known || info.Name != c.name || info.Headers != c.headers || info.Request != c.request || info.Source != c.source {
			t.Errorf("%#02x: %+v, want %s headers %#x request %v source %v", uint8(c.op), info, c.name, c.headers, c.request, c.source)
		}
		if c.op.String() != c.name {
			t.Errorf("%#02x: String %q, want %q", uint8(c.op), c.op.String(), c.name)
		}
	}
	// Every other RC and CNP-prefix opcode is undefined: named by number, never a source.
	for op := range Opcode(0xa0) {
		if t := Transport(op >> 5); t != TransportRC && t != TransportCNP || seen[op] {
			continue
		}
		if info := op.Info(); info.Known || info.Source || info.Name != "" {
			t.Errorf("%#02x: undefined opcode described as %+v", uint8(op), info)
		}
	}
	if s := Opcode(0x15).String(); s != "OPCODE_0x15" {
		t.Errorf("0x15 named %q", s)
	}
}

// Section 5: UC and UD opcodes are recognised enough to name them (and parse the UC SEND/WRITE
// and UD SEND forms); RD and XRC are named by transport only.
func TestOpcodeTableOtherTransportsSection5(t *testing.T) {
	cases := []struct {
		op        Opcode
		name      string
		transport Transport
		known     bool
		headers   Headers
	}{
		{0x20, "UC_SEND_FIRST", TransportUC, true, HasPayload},
		{0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", TransportUC, true, HasRETH | HasImmDt | HasPayload},
		{0x2c, "OPCODE_0x2c", TransportUC, false, 0}, // UC has no READ
		{0x64, "UD_SEND_ONLY", TransportUD, true, HasDETH | HasPayload},
		{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", TransportUD, true, HasDETH | HasImmDt | HasPayload},
		{0x60, "OPCODE_0x60", TransportUD, false, 0},
		{0x44, "OPCODE_0x44", TransportRD, false, 0},
		{0xa4, "XRC_SEND_ONLY", TransportXRC, false, 0},
		{0xc0, "OPCODE_0xc0", TransportVendor, false, 0},
		{0xff, "OPCODE_0xff", TransportVendor, false, 0},
	}
	for _, c := range cases {
		info := c.op.Info()
		if c.op.String() != c.name || info.Transport != c.transport || info.Known != c.known || info.Headers != c.headers {
			t.Errorf("%#02x: %q %+v, want %q %v known %v headers %#x", uint8(c.op), c.op.String(), info, c.name, c.transport, c.known, c.headers)
		}
	}
}

// RULINGS C13: a READ request consumes max(1, ceil(DMA Length / RDMA MTU)) PSNs; every other
// source one; ACKNOWLEDGE, ATOMIC ACKNOWLEDGE and CNP none.
func TestPSNsConsumedC13(t *testing.T) {
	cases := []struct {
		op       Opcode
		dmaLen   uint32
		mtu      uint32
		want     uint32
		scenario string
	}{
		{OpReadRequest, 0, 1024, 1, "zero-length READ still takes its own PSN"},
		{OpReadRequest, 1, 1024, 1, "one octet"},
		{OpReadRequest, 1024, 1024, 1, "exactly one MTU"},
		{OpReadRequest, 1025, 1024, 2, "one octet over"},
		{OpReadRequest, 4096, 1024, 4, "four MTUs"},
		{OpReadRequest, 4097, 4096, 2, "4 KiB MTU"},
		{OpReadRequest, 1 << 31, 256, 1 << 23, "2 GiB in 256-octet packets"},
		{OpReadRequest, 0xffffffff, 256, 1 << 24, "largest DMA length"},
		{OpReadRequest, 5000, 0, 1, "unknown MTU"},
		{OpSendFirst, 1 << 20, 1024, 1, "SEND packet"},
		{OpWriteFirst, 1 << 20, 1024, 1, "WRITE FIRST: the RETH length does not matter"},
		{OpFetchAdd, 8, 1024, 1, "atomic"},
		{OpReadResponseMiddle, 0, 1024, 1, "READ response, reverse direction"},
		{OpAcknowledge, 4096, 1024, 0, "ACK"},
		{OpAtomicAcknowledge, 0, 1024, 0, "ATOMIC ACK"},
		{OpCNP, 0, 1024, 0, "CNP"},
		{Opcode(0x15), 0, 1024, 0, "undefined"},
	}
	for _, c := range cases {
		if got := c.op.PSNs(c.dmaLen, c.mtu); got != c.want {
			t.Errorf("%s: %v.PSNs(%d, %d) = %d, want %d", c.scenario, c.op, c.dmaLen, c.mtu, got, c.want)
		}
	}
}
