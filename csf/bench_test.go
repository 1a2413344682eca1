package csf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// codecPaths lists the codec paths package fec runs on this machine.
func codecPaths() []fec.Kernels {
	var ks []fec.Kernels
	for _, k := range []fec.Kernels{fec.KernelsGFNI, fec.KernelsNibble, fec.KernelsPortable} {
		if k.Available() {
			ks = append(ks, k)
		}
	}
	return ks
}

// BenchmarkSender measures the CSF's whole per-packet path (crem: Observe, block bookkeeping,
// the source symbol, m = 4 repair symbols per k = 32 block with T = 1058, the REPAIR messages,
// Drain) against the bare encoding cost per packet (encode-only: the source symbol and the
// repair computation of package fec, nothing else), side by side in one run on every codec
// path this machine has (gfni, avx2, portable: fec.WithKernels). Both sides first run until
// every held block has been filled once, so the memory of the window is touched before the
// timer starts and a short -benchtime measures the same steady state as a long one.
func BenchmarkSender(b *testing.B) {
	const k, m, T, payload = 32, 4, 1058, 1024
	// Packets come from a ring like a NIC's; each PSN is written well before the packet is
	// read, so that neither side pays for store forwarding.
	const ring, ahead = 128, 64
	pkts := make([][]byte, ring)
	for i := range pkts {
		pkts[i] = packet(psn.PSN(i), payload)
	}
	setAhead := func(i int) { setPSN(pkts[i%ring], psn.PSN(i)) }
	for _, kern := range codecPaths() {
		newEncoder := func(b *testing.B) *fec.Encoder {
			enc, err := fec.NewEncoder(fec.WithKernels(kern))
			if err != nil {
				b.Fatal(err)
			}
			return enc
		}
		b.Run(kern.Name()+"/crem", func(b *testing.B) {
			s := newSender(b, WithConfig(wire.SchemeCauchy, k, m, T), WithAdaptation(false), WithRepairFraction(1),
				WithEncoder(newEncoder(b)))
			establish(b, s, 0, 0xBEEF)
			sink := 0
			out := func(d flow.Datagram) { sink += len(d.Payload) }
			now := time.Duration(0)
			for i := range ahead {
				setAhead(i)
			}
			i := 0
			step := func() {
				setAhead(i + ahead)
				now += time.Microsecond
				s.Observe(now, pkts[i%ring])
				s.Drain(out)
				i++
			}
			testenv.SteadyState(b, (len(s.blocks)+2)*k, 64*k, int64(len(pkts[0])), step) // every held block filled once
			if st := s.Stats(); st.RepairSent == 0 || st.BlocksEvicted == 0 {
				b.Fatalf("not the steady state measured: %+v", st)
			}
		})
		b.Run(kern.Name()+"/encode-only", func(b *testing.B) {
			// The codec alone: each packet becomes its source symbol (S = len || P || padding,
			// the draft's definition), and each k-th computes the block's m repair symbols. No
			// parsing, no block bookkeeping, no messages, one block's buffers reused.
			enc := newEncoder(b)
			src := make([][]byte, k)
			for j := range src {
				src[j] = make([]byte, 0, T)
			}
			dst := make([][]byte, m)
			for r := range dst {
				dst[r] = make([]byte, T)
			}
			idx := []int{0, 1, 2, 3}
			all := psn.FirstK(k)
			for i := range ahead {
				setAhead(i)
			}
			i := 0
			step := func() {
				j := i % k
				setAhead(i + ahead)
				src[j], _ = fec.AppendSymbol(src[j][:0], pkts[i%ring], T)
				if j == k-1 {
					if err := enc.Encode(dst, idx, all, src); err != nil {
						b.Fatal(err)
					}
				}
				i++
			}
			testenv.SteadyState(b, 4*k, 64*k, int64(len(pkts[0])), step)
		})
	}
}

// BenchmarkSenderHeldBlocks measures the per-packet cost (Observe, NextDeadline, Tick when due,
// Drain; k = 32, m = 8 with 4 paced symbols per block) with 64 and with 8192 blocks held
// unacknowledged, with package fec's encoder (fec) and with one that reads only a prefix of each
// source (prefix): the deadline heap makes the engine's own work independent of the blocks held;
// what remains with fec is the memory of the sources held (8192 x 32 x T).
func BenchmarkSenderHeldBlocks(b *testing.B) {
	const k, m, T, payload = 32, 8, 1058, 1024
	for _, c := range []struct {
		name string
		held int
	}{{"fec/64", 64}, {"fec/8192", 8192}, {"prefix/64", 64}, {"prefix/8192", 8192}} {
		held := c.held
		b.Run(c.name, func(b *testing.B) {
			opts := []Option{WithConfig(wire.SchemeCauchy, k, m, T), WithAdaptation(false), WithRepairFraction(1),
				WithMaxHeldBlocks(held)}
			if c.name[0] == 'p' {
				opts = append(opts, WithEncoder(&prefixEncoder{n: 14}))
			}
			s := newSender(b, opts...)
			establish(b, s, 0, 0xBEEF)
			pkt := packet(0, payload)
			out := func(flow.Datagram) {}
			now, i := time.Duration(0), 0
			step := func() {
				setPSN(pkt, psn.PSN(i))
				i++
				now += time.Microsecond
				s.Observe(now, pkt)
				if t, ok := s.NextDeadline(); ok && t <= now {
					s.Tick(now)
				}
				s.Drain(out)
			}
			for range held * k { // every slot holds a block before the measurement
				step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				step()
			}
			b.StopTimer()
			if st := s.Stats(); st.BlocksEvicted == 0 || st.RepairPaced == 0 {
				b.Fatalf("not the case measured: %+v", st)
			}
		})
	}
}
