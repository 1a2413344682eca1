package rc

import (
	"testing"
	"time"

	"github.com/crem-project/crem/roce"
)

// Segmentation at the RDMA MTU: FIRST/MIDDLE/LAST/ONLY, the RETH on the first packet only,
// ImmDt on the last, pad count, AckReq on the last, one PSN per packet, READ requests taking
// max(1, ceil(len/MTU)) PSNs; every packet carries an ICRC good under the logical header.
func TestSegmentation(t *testing.T) {
	cfg := testCfg(ModeGBN)
	cfg.MTU = 256
	q := newTestQP(t, cfg)
	posts := []SendWR{
		{Op: OpWriteImm, Local: make([]byte, 600), RemoteAddr: 0x1000, RKey: 7, Imm: 0xabcd}, // 3 packets
		{Op: OpSend, Local: make([]byte, 255)},                                               // ONLY, pad 1
		{Op: OpRead, Local: make([]byte, 513), RemoteAddr: 0x2000, RKey: 7},                  // 3 PSNs
		{Op: OpRead, Local: nil, RemoteAddr: 0x2000, RKey: 7},                                // 1 PSN
		{Op: OpSendImm, Local: make([]byte, 512), Imm: 5},                                    // FIRST, LAST_WITH_IMM
		{Op: OpFetchAdd, Local: make([]byte, 8), RemoteAddr: 0x3000, RKey: 7, SwapAdd: 1},
	}
	for _, wr := range posts {
		if err := q.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	in := roce.LogicalHeader{Src: cfg.LocalAddr, Dst: cfg.RemoteAddr, SrcPort: cfg.LocalPort}
	var got []roce.Packet
	now := time.Duration(0)
	for range 20 {
		q.Tick(now)
		q.Drain(func(b []byte) {
			if err := in.Verify(b); err != nil {
				t.Fatalf("ICRC: %v", err)
			}
			p, err := roce.ParsePacket(b)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, p)
		})
		now += time.Millisecond
	}
	want := []struct {
		op     roce.Opcode
		psn    uint32
		n      int
		ackReq bool
		pad    uint8
	}{
		{roce.OpWriteFirst, 100, 256, false, 0},
		{roce.OpWriteMiddle, 101, 256, false, 0},
		{roce.OpWriteLastWithImmediate, 102, 88, true, 0},
		{roce.OpSendOnly, 103, 255, true, 1},
		{roce.OpReadRequest, 104, 0, true, 0},
		{roce.OpReadRequest, 107, 0, true, 0},
		{roce.OpSendFirst, 108, 256, false, 0},
		{roce.OpSendLastWithImmediate, 109, 256, true, 0},
		{roce.OpFetchAdd, 110, 0, true, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("%d packets, want %d", len(got), len(want))
	}
	for i, w := range want {
		p := got[i]
		if p.BTH.OpCode != w.op || uint32(p.BTH.PSN) != w.psn || len(p.Payload) != w.n || p.BTH.AckReq != w.ackReq ||
			p.BTH.PadCount != w.pad || p.BTH.DestQP != 0x11 {
			t.Errorf("packet %d: %v psn %d len %d ackreq %v pad %d", i, p.BTH.OpCode, p.BTH.PSN, len(p.Payload), p.BTH.AckReq, p.BTH.PadCount)
		}
	}
	if r := got[0].RETH; r.VA != 0x1000 || r.RKey != 7 || r.DMALength != 600 || got[2].ImmDt != 0xabcd {
		t.Errorf("RETH %+v imm %x", r, got[2].ImmDt)
	}
	if got[4].RETH.DMALength != 513 || got[5].RETH.DMALength != 0 {
		t.Errorf("READ lengths %d %d", got[4].RETH.DMALength, got[5].RETH.DMALength)
	}
}

// T1, T3: an extended ACK on the wire is BTH + AETH + the 32-octet T/C AETH (ten 24-bit
// fields and two octets of zero padding) + ICRC; SegmentNum is 1 + the Seg fields used;
// unused Seg fields, reserved fields and padding are zero.
func TestT1T3ExtendedAckOnTheWire(t *testing.T) {
	q := newTestQP(t, testCfg(ModeTCAETH))
	mem := make([]byte, 8192)
	mr, _ := q.RegisterMR(mem, AccessRemoteWrite)
	pr := peerOf(q)
	q.Handle(0, pr.write(t, roce.OpWriteFirst, 100, roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 5000}, make([]byte, 1024), false))
	q.Handle(0, pr.write(t, roce.OpWriteMiddle, 102, roce.RETH{}, make([]byte, 1024), true))
	var raw [][]byte
	q.Drain(func(b []byte) { raw = append(raw, b) })
	if len(raw) == 0 {
		t.Fatal("no ACK")
	}
	b := raw[len(raw)-1]
	if len(b) != roce.BTHLen+roce.AETHLen+32+roce.ICRCLen {
		t.Fatalf("extended ACK of %d octets", len(b))
	}
	f := b[roce.BTHLen+roce.AETHLen:]
	get := func(i int) uint32 { return uint32(f[3*i])<<16 | uint32(f[3*i+1])<<8 | uint32(f[3*i+2]) }
	if get(0) != 2 || get(1) != 100 || get(2) != 102 || get(3) != 102 {
		t.Fatalf("fields %d %d %d %d", get(0), get(1), get(2), get(3))
	}
	for i := 4; i < 10; i++ {
		if get(i) != 0 {
			t.Fatalf("field %d = %d, want 0", i, get(i))
		}
	}
	if f[30] != 0 || f[31] != 0 {
		t.Fatal("padding not zero")
	}
}
