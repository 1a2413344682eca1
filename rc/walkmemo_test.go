package rc

import (
	"hash/fnv"
	"testing"
	"time"

	"github.com/crem-project/crem/roce"
)

// The walks of reported runs skip what an earlier report of the same run walked (the sr run
// memo, the tcaeth marked spans): a lossy 32 MiB WRITE at 400 Gbit/s and 25 ms behaves the same
// packet for packet, at the same instants, as with every report walked whole.
func TestReportWalkMemosChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  Mode
		noNAK bool
	}{{"sr-rto", ModeSR, true}, {"sr-nack", ModeSR, false}, {"tcaeth", ModeTCAETH, false}} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(full bool) (time.Duration, [2]Stats, uint64) {
				ca, cb := benchCfgs(tc.mode, true)
				ca.SRNoNAK, cb.SRNoNAK = tc.noNAK, tc.noNAK
				const size = 32 << 20
				d := &delayPair{qp: [2]*QP{newTestQP(t, ca), newTestQP(t, cb)}, delay: ca.RTT / 2}
				d.qp[0].req.fullWalks = full
				mr, err := d.qp[1].RegisterMR(make([]byte, size), AccessRemoteWrite)
				if err != nil {
					t.Fatal(err)
				}
				if err := d.qp[0].PostSend(SendWR{ID: 1, Op: OpWrite, Local: make([]byte, size), RemoteAddr: mr.Addr, RKey: mr.RKey}); err != nil {
					t.Fatal(err)
				}
				// Every packet either way, in order, with the instant it left: the trace.
				h := fnv.New64a()
				var n [2]uint64
				d.drop = func(from int, p *roce.Packet) bool {
					n[from]++
					var b [24]byte
					b[0], b[1] = byte(from), byte(p.BTH.OpCode)
					putU32(b[2:], uint32(p.BTH.PSN))
					putU32(b[6:], uint32(p.AETH.Syndrome)<<24|p.AETH.MSN)
					putU64(b[10:], uint64(d.now))
					h.Write(b[:18])
					// Seeded loss, 1 in 64 either way, in bursts now and then.
					x := mix64(n[from]*2 + uint64(from))
					return x%64 == 0 || n[from]%5000 < 3
				}
				var comps []Completion
				done := func() bool {
					comps = d.qp[0].PollCompletions(comps[:0])
					for _, c := range comps {
						if c.Status != StatusSuccess {
							t.Fatalf("%+v", c)
						}
					}
					return len(comps) == 1
				}
				if !d.runUntil(t, done, 10*time.Second) {
					t.Fatalf("not done: %+v", d.qp[0].Stats())
				}
				return d.now, [2]Stats{d.qp[0].Stats(), d.qp[1].Stats()}, h.Sum64()
			}
			at, st, trace := run(false)
			fullAt, fullSt, fullTrace := run(true)
			if st[0].RetransmittedPackets == 0 || st[1].SeqNAKs+st[1].AckPackets == 0 {
				t.Fatalf("no recovery to compare: %+v", st)
			}
			if at != fullAt || st != fullSt || trace != fullTrace {
				t.Fatalf("with the memos: done at %v, stats %+v, trace %x; walked whole: %v, %+v, %x",
					at, st, trace, fullAt, fullSt, fullTrace)
			}
			t.Logf("done at %v, %d retransmitted, %d reports", at, st[0].RetransmittedPackets, st[1].SeqNAKs)
		})
	}
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}
func putU64(b []byte, v uint64) { putU32(b, uint32(v>>32)); putU32(b[4:], uint32(v)) }
