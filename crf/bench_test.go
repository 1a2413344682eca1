package crf

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

// BenchmarkReceiver measures the CRF's per-packet path without loss (crem: Observe of every
// source, the m = 4 REPAIR messages of each k = 32 block, T = 1058) against copying the packet
// once (copy), side by side in one run, with the decoders of every codec path this machine has
// (gfni, avx2, portable: fec.WithKernels). The receiver first runs until every block slot and
// the whole source history have been used once, so the memory of its window is touched before
// the timer starts and a short -benchtime measures the same steady state as a long one.
func BenchmarkReceiver(b *testing.B) {
	const k, m, T, payload = 32, 4, 1058, 1024
	// Packets come from a ring like a NIC's receive ring; each PSN is written well before the
	// packet is read, as a NIC would have, so that neither side pays for store forwarding.
	const ring, ahead = 128, 64
	pkts := make([][]byte, ring)
	for i := range pkts {
		pkts[i] = packet(psn.PSN(i), payload)
	}
	setPSN := func(i int) {
		p, pk := psn.PSN(i), pkts[i%ring]
		pk[9], pk[10], pk[11] = byte(p>>16), byte(p>>8), byte(p)
	}
	for _, kern := range codecPaths() {
		b.Run(kern.Name()+"/crem", func(b *testing.B) {
			r := newReceiver(b, Settings{}, WithDecoders(func() (flow.Decoder, error) {
				return fec.NewDecoder(fec.WithKernels(kern))
			}))
			cfg := flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: k, M: m, T: T}
			id := open(b, r, 0, cfg)
			reps := make([][]byte, m)
			for i := range reps {
				rep := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: k, RepairIndex: uint8(i),
					Present: psn.FirstK(k), Symbol: make([]byte, T)}
				reps[i] = msg(b, &rep)
			}
			for i := range ahead {
				setPSN(i)
			}
			now, i := time.Duration(0), 0
			step := func() {
				setPSN(i + ahead)
				now += time.Microsecond
				r.Observe(now, id, pkts[i%ring], false)
				if i%k == k-1 {
					start := psn.PSN(i - (k - 1))
					for _, rep := range reps {
						rep[12], rep[13], rep[14] = byte(start>>16), byte(start>>8), byte(start)
						r.Handle(now, testCSF, rep, false)
					}
				}
				i++
			}
			lim := r.o.limits
			testenv.SteadyState(b, (2*lim.MaxOpenBlocks+2)*max(lim.MaxK, k), 64*k, int64(len(pkts[0])), step) // every slot, the whole history
			if st, _ := r.FlowStats(id); st.BlocksFullyReceived == 0 {
				b.Fatalf("no block completed: %+v", st)
			}
		})
		b.Run(kern.Name()+"/copy", func(b *testing.B) {
			buf := make([]byte, 0, 2048)
			for i := range ahead {
				setPSN(i)
			}
			i := 0
			step := func() {
				setPSN(i + ahead)
				buf = append(buf[:0], pkts[i%ring]...)
				i++
			}
			testenv.SteadyState(b, ring, 64*k, int64(len(pkts[0])), step)
			_ = buf
		})
	}
}

// BenchmarkReceiverLoss measures the path of a block with one loss: Observe of k - 1 sources,
// the REPAIR that restores the lost one (its solve, its ICRC check and delivery), and the
// block's other REPAIRs, which find it ended (k = 32, m = 4, T = 1058). Building each block's
// packets and repair is not timed.
func BenchmarkReceiverLoss(b *testing.B) {
	const k, m, T, payload = 32, 4, 1058, 1024
	r := newReceiver(b, Settings{})
	cfg := flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: k, M: m, T: T}
	id := open(b, r, 0, cfg)
	enc, err := fec.NewEncoder()
	if err != nil {
		b.Fatal(err)
	}
	pkts := make([][]byte, k)
	syms := make([][]byte, k)
	dst := make([][]byte, m)
	idx := make([]int, m)
	reps := make([][]byte, m)
	for i := range m {
		dst[i], idx[i] = make([]byte, T), i
	}
	build := func(base psn.PSN) {
		for j := range k {
			pkts[j] = packet(base.Add(j), payload)
			syms[j], _ = fec.AppendSymbol(syms[j][:0], pkts[j], T)
		}
		if err := enc.Encode(dst, idx, psn.FirstK(k), syms); err != nil {
			b.Fatal(err)
		}
		for i := range m {
			rep := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: k, RepairIndex: uint8(i),
				BlockStartPSN: base, Present: psn.FirstK(k), Symbol: dst[i]}
			reps[i], _ = rep.Append(reps[i][:0])
		}
	}
	now := time.Duration(0)
	b.SetBytes(int64(k * (payload + 16)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		build(psn.PSN(i * k))
		b.StartTimer()
		now += 40 * time.Microsecond
		for j, p := range pkts {
			if j != 7 {
				r.Observe(now, id, p, false)
			}
		}
		for _, rep := range reps {
			r.Handle(now, testCSF, rep, false)
		}
		r.DrainDeliveries(func(Delivery) {})
		r.Drain(func(flow.Datagram) {})
	}
	b.StopTimer()
	if st, _ := r.FlowStats(id); st.Restored != uint64(b.N) || st.ICRCMismatch != 0 {
		b.Fatalf("%d blocks, %d restored, %d mismatches", b.N, st.Restored, st.ICRCMismatch)
	}
}
