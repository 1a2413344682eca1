package pcapstats

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

const testCREMPort = 50000

var (
	csfAddr  = netip.MustParseAddr("192.0.2.1")
	crfAddr  = netip.MustParseAddr("192.0.2.2")
	hostA    = netip.MustParseAddr("10.0.0.1")
	hostB    = netip.MustParseAddr("10.0.0.2")
	toCRF    = [2]netip.AddrPort{netip.AddrPortFrom(csfAddr, testCREMPort), netip.AddrPortFrom(crfAddr, testCREMPort)}
	toCSF    = [2]netip.AddrPort{netip.AddrPortFrom(crfAddr, testCREMPort), netip.AddrPortFrom(csfAddr, testCREMPort)}
	roceAB   = [2]netip.AddrPort{netip.AddrPortFrom(hostA, 49152), netip.AddrPortFrom(hostB, roce.UDPPort)}
	roceBA   = [2]netip.AddrPort{netip.AddrPortFrom(hostB, 49153), netip.AddrPortFrom(hostA, roce.UDPPort)}
	testTime = time.Unix(1_700_000_000, 0)
)

// frames builds a capture frame by frame.
type frames struct {
	t    *testing.T
	list [][]byte
	orig []int
}

func (f *frames) udp(ends [2]netip.AddrPort, payload []byte, dropped bool) []byte {
	f.t.Helper()
	h := capture.FrameHeader{Src: ends[0], Dst: ends[1]}
	if dropped {
		h.TTL = 1
	}
	b, err := capture.AppendUDPFrame(nil, h, payload)
	if err != nil {
		f.t.Fatal(err)
	}
	f.list = append(f.list, b)
	f.orig = append(f.orig, len(b))
	return b
}

func (f *frames) crem(ends [2]netip.AddrPort, m wire.Message, dropped bool) {
	f.t.Helper()
	b, err := m.Append(nil)
	if err != nil {
		f.t.Fatalf("%T: %v", m, err)
	}
	f.udp(ends, b, dropped)
}

// roce appends a RoCEv2 packet with a good ICRC (or a bad one) under the frame's headers.
func (f *frames) roce(ends [2]netip.AddrPort, p roce.Packet, dropped, badICRC bool) {
	f.t.Helper()
	b, err := p.Append(nil)
	if err != nil {
		f.t.Fatal(err)
	}
	fr := f.udp(ends, b, dropped)
	d, err := capture.DecodeUDP(capture.LinkEthernet, fr)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := roce.SealICRC(d.IPHeader, d.UDPHeader, d.Payload); err != nil {
		f.t.Fatal(err)
	}
	if badICRC {
		d.Payload[len(d.Payload)-1] ^= 0xff
	}
}

func (f *frames) data(qp uint32, p uint32, dropped bool) {
	f.roce(roceAB, roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, DestQP: qp, PSN: psn.PSN(p)},
		Payload: bytes.Repeat([]byte{byte(p)}, 64)}, dropped, false)
}

// pcap writes the frames as a classic pcap file.
func (f *frames) pcap() []byte {
	f.t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, b := range f.list {
		if err := w.WriteFrame(testTime, b); err != nil {
			f.t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// pcapng writes the frames as a pcapng file of one Ethernet interface.
func (f *frames) pcapng() []byte {
	var b []byte
	block := func(typ uint32, body []byte) {
		n := 12 + len(body) + (-len(body) & 3)
		b = binary.LittleEndian.AppendUint32(b, typ)
		b = binary.LittleEndian.AppendUint32(b, uint32(n))
		b = append(b, body...)
		b = append(b, make([]byte, -len(body)&3)...)
		b = binary.LittleEndian.AppendUint32(b, uint32(n))
	}
	shb := binary.LittleEndian.AppendUint32(nil, 0x1a2b3c4d)
	shb = binary.LittleEndian.AppendUint16(shb, 1)
	shb = binary.LittleEndian.AppendUint16(shb, 0)
	shb = binary.LittleEndian.AppendUint64(shb, ^uint64(0))
	block(0x0a0d0d0a, shb)
	idb := binary.LittleEndian.AppendUint16(nil, uint16(capture.LinkEthernet))
	idb = binary.LittleEndian.AppendUint16(idb, 0)
	idb = binary.LittleEndian.AppendUint32(idb, 0)
	block(1, idb)
	for i, fr := range f.list {
		epb := binary.LittleEndian.AppendUint32(nil, 0)
		epb = binary.LittleEndian.AppendUint32(epb, 0)
		epb = binary.LittleEndian.AppendUint32(epb, uint32(i))
		epb = binary.LittleEndian.AppendUint32(epb, uint32(len(fr)))
		epb = binary.LittleEndian.AppendUint32(epb, uint32(f.orig[i]))
		epb = append(epb, fr...)
		block(6, epb)
	}
	return b
}

// analyze feeds the frames to an Analyzer.
func (f *frames) analyze(o Options) Summary {
	f.t.Helper()
	a, err := New(o)
	if err != nil {
		f.t.Fatal(err)
	}
	for i, b := range f.list {
		a.Frame(capture.LinkEthernet, b, f.orig[i])
	}
	return a.Summary()
}

func bitmap(k int, pos ...int) psn.Bitmap {
	var b psn.Bitmap
	for _, j := range pos {
		b.Set(j)
	}
	_ = k
	return b
}
