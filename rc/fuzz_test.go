package rc

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/fuzzcorpus"
	"github.com/crem-project/crem/roce"
)

// FuzzResponderMemorySafety feeds arbitrary packets, alone or in sequences, to a responder in
// every mode, each both as given and sealed with a good ICRC (so that they reach the checks past
// the ICRC), and checks that memory outside what a correct request may write never changes:
// the guards around the writable region, a region registered without the write right, and
// everything but the posted receive buffer.
func FuzzResponderMemorySafety(f *testing.F) {
	seed := func(p roce.Packet) []byte {
		p.BTH.DestQP, p.BTH.PKey = 0x22, 0xffff
		b, _ := p.Append(nil)
		return b
	}
	f.Add(seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteOnly, PSN: 100}, RETH: roce.RETH{VA: 0x10000000000 + 1<<32, RKey: 0, DMALength: 4}, Payload: []byte("abcd")}), uint8(0))
	f.Add(seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteFirst, PSN: 101}, RETH: roce.RETH{DMALength: 5000}, Payload: make([]byte, 1024)}), uint8(1))
	f.Add(seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, PSN: 104}, Payload: make([]byte, 1024)}), uint8(2))
	f.Add(seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, PSN: 100}, RETH: roce.RETH{DMALength: 1 << 30}}), uint8(1))
	f.Add(seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpFetchAdd, PSN: 100}, AtomicETH: roce.AtomicETH{SwapAdd: 1}}), uint8(2))
	f.Add(seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpSendOnly, PSN: 0x7fffff}, Payload: make([]byte, 9)}), uint8(0))
	multi := []byte{0xff}
	for _, p := range [][]byte{
		seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteFirst, PSN: 100}, RETH: roce.RETH{DMALength: 600}, Payload: make([]byte, 256)}),
		seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteLast, PSN: 102}, Payload: make([]byte, 88)}),
		seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, PSN: 101}, Payload: make([]byte, 256)}),
		seed(roce.Packet{BTH: roce.BTH{OpCode: roce.OpSendOnly, PSN: 103}, Payload: make([]byte, 40)}),
	} {
		for len(p)%8 != 0 {
			p = append(p, 0)
		}
		multi = append(multi, byte(len(p)/8))
		multi = append(multi, p...)
	}
	f.Add(multi, uint8(0))
	// The real capture's packets (read in place, never copied into the repository).
	if pkts, err := fuzzcorpus.RealRoCEv2(); err == nil {
		for i, p := range pkts {
			f.Add(p, uint8(i%3))
		}
	} else {
		f.Logf("real capture not used: %v", err)
	}
	f.Fuzz(func(t *testing.T, in []byte, modeSel uint8) {
		// The input is one packet, or several: a leading 0xff says "length-prefixed list"
		// (one octet of length, then the packet), so the fuzzer can build messages of many
		// packets, out of order, with retransmissions.
		pkts := [][]byte{in}
		if len(in) > 0 && in[0] == 0xff {
			pkts = nil
			for rest := in[1:]; len(rest) > 0; {
				n := min(int(rest[0])*8, len(rest)-1)
				pkts = append(pkts, rest[1:1+n])
				rest = rest[1+n:]
			}
		}
		for _, mode := range []Mode{ModeGBN, ModeSR, ModeTCAETH} {
			cfg := testCfg(mode)
			cfg.RecvWindow = 64
			q := newTestQP(t, cfg)
			mem := make([]byte, 4*4096)
			for i := range mem {
				mem[i] = 0x5a
			}
			region, readonly := mem[4096:8192:8192], mem[12288:16384:16384]
			mr, _ := q.RegisterMR(region, AccessRemoteWrite|AccessRemoteAtomic)
			ro, _ := q.RegisterMR(readonly, AccessRemoteRead)
			q.PostRecv(RecvWR{ID: 1, Buf: mem[8192 : 8192+100]}) // a receive buffer, writable by SEND
			before := bytes.Clone(mem)
			pr := peerOf(q)
			for i, pkt := range pkts {
				b := aim(bytes.Clone(pkt), mr, ro, modeSel)
				now := time.Duration(i) * time.Millisecond
				q.Handle(now, b) // as given
				if len(b) >= roce.BTHLen+roce.ICRCLen {
					pr.h.Seal(b)
					q.Handle(now, b)
					q.Handle(now, b) // and again, as a retransmission
				}
				q.Tick(now + 500*time.Microsecond)
				q.Drain(func([]byte) {})
			}
			q.Tick(time.Hour)
			q.Drain(func([]byte) {})
			if !bytes.Equal(mem[:4096], before[:4096]) || !bytes.Equal(mem[8192+100:], before[8192+100:]) {
				t.Fatalf("%v: memory outside the writable region and the receive buffer changed", mode)
			}
		}
	})
}

// aim points a fuzzed packet at this QP and its regions: the destination QP, and the address
// and key of a RETH or AtomicETH, choosing the region by a bit of sel.
func aim(b []byte, mr, ro *MR, sel uint8) []byte {
	if len(b) >= roce.BTHLen {
		b[5], b[6], b[7] = 0, 0, 0x22
		b[2], b[3] = 0xff, 0xff
	}
	if len(b) >= roce.BTHLen+roce.RETHLen {
		if op := roce.Opcode(b[0]); op.Info().Headers&(roce.HasRETH|roce.HasAtomicETH) != 0 {
			key, base := mr.RKey, mr.Addr
			if sel&1 == 1 {
				key, base = ro.RKey, ro.Addr
			}
			va := binary.BigEndian.Uint64(b[12:])
			binary.BigEndian.PutUint64(b[12:], base+va%8192-2048)
			binary.BigEndian.PutUint32(b[20:], key)
		}
	}
	return b
}
