package crf_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/wire"
)

// helloDeadline is when a CSF that started at 0 gives up its HELLO: eight attempts with
// exponential backoff from 1 ms (draft, Session; csf: 0, 1, 3, ..., 127 ms, then 128 ms more).
const helloDeadline = 255 * time.Millisecond

// TestHelloFlood (draft, Session; C3; E54): under a flood of 3,000 HELLOs a second, from
// many spoofed addresses or from one, with random descriptors or with the real flow's own, a
// real CSF (package csf, in virtual time over a 1 ms link) gets its HELLO_ACK at its first
// attempt, its configuration acknowledged within its eight, and its flow protected while the
// flood goes on; the CRF's pending sessions stay within their bound.
func TestHelloFlood(t *testing.T) {
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("10.0.0.1"),
		Dst: netip.MustParseAddr("10.0.0.2"), DestQP: 0x11, SrcPort: 49152}
	csfAddr := netip.MustParseAddrPort("10.0.0.1:50000")
	scenarios := []struct {
		name  string
		from  func(rng *rand.Rand) netip.AddrPort
		ownQP bool // the flood uses the real flow's descriptor
	}{
		{"many addresses", func(rng *rand.Rand) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}), uint16(rng.Uint32()))
		}, false},
		{"one address", func(*rand.Rand) netip.AddrPort { return netip.MustParseAddrPort("192.0.2.7:40000") }, false},
		{"the CSF's own address", func(*rand.Rand) netip.AddrPort { return csfAddr }, false},
		{"many addresses, the flow's descriptor", func(rng *rand.Rand) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}), uint16(rng.Uint32()))
		}, true},
	}
	const gap = time.Second / 3000
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			p, err := cremtest.NewPair(cremtest.Config{Seed: 11, Flow: desc, CSFAddr: csfAddr,
				Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 8, 2, 0), csf.WithAdaptation(false)}})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(11, 12))
			flood := func(d time.Duration) {
				for end := p.Clock.Now() + d; p.Clock.Now() < end; {
					h := wire.Hello{Capabilities: flow.DefaultLimits().Capabilities(1024), SenderNonce: rng.Uint64(),
						Source:      netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}),
						Destination: desc.Dst, FlowLabel: rng.Uint32() & 0xffffff}
					if sc.ownQP {
						h.Source, h.FlowLabel = desc.Src, desc.DestQP
					}
					b, err := h.Append(nil)
					if err != nil {
						t.Fatal(err)
					}
					p.Inject(cremtest.Forward, sc.from(rng), b)
					p.RunFor(gap)
				}
			}
			flood(2 * time.Second) // the tables are in their steady state when the flow starts
			start := p.Clock.Now()
			p.Start()
			var acked, configured time.Duration
			for p.Clock.Now() < start+helloDeadline+100*time.Millisecond && configured == 0 {
				flood(gap)
				if acked == 0 && p.Sender.Stats().HelloAckAccepted > 0 {
					acked = p.Clock.Now() - start
				}
				if _, ok := p.Sender.Config(); ok {
					configured = p.Clock.Now() - start
				}
			}
			sst := p.Sender.Stats()
			if acked == 0 || configured == 0 || configured > helloDeadline || sst.Unprotected != 0 {
				t.Fatalf("HELLO_ACK after %v, configuration after %v (state %v): %+v\nCRF %+v", acked, configured,
					p.Sender.State(), sst, p.Receiver.Stats())
			}
			t.Logf("HELLO_ACK after %v (%d HELLO attempts), configured after %v", acked, sst.HelloSent, configured)
			// The flow is protected while the flood goes on: every tenth packet lost, restored.
			p.Link.Filter = func(pk *cremtest.Packet) cremtest.Fate {
				return cremtest.Fate{Drop: pk.Kind == cremtest.RDMA && pk.Dir == cremtest.Forward && pk.N%10 == 3}
			}
			for range 400 {
				p.Send(p.Synth.Next(500))
				flood(gap)
			}
			p.Link.Filter = nil
			p.Send(p.Synth.Next(500))
			flood(time.Second)
			st := p.Receiver.Stats()
			restored, wrong, missing := 0, 0, 0
			for q := range p.Sent {
				o := p.Outcomes[q]
				switch {
				case o == nil || o.Received+o.Restored == 0:
					missing++
				case o.Wrong > 0:
					wrong++
				case o.Restored > 0:
					restored++
				}
			}
			if wrong != 0 || missing != 0 || restored < 35 || st.Flows.ICRCMismatch != 0 {
				t.Fatalf("under the flood: %d restored, %d wrong, %d missing of %d\n%+v", restored, wrong, missing, len(p.Sent), st)
			}
			fp := p.Receiver.Footprint()
			if fp.Flows != 1 || fp.Pending > 2048 || p.Receiver.Flows()[0] != p.FlowID() {
				t.Fatalf("footprint %+v", fp)
			}
			if st.HelloReceived != st.HelloDuplicate+st.HelloRefused+st.TakeoverRefused+st.HelloBusy+st.HandshakesOpened {
				t.Fatalf("HELLOs do not add up: %+v", st)
			}
			t.Logf("%d HELLOs: %d pending opened, %d evicted, %d expired, %d busy, %d takeovers refused; %d pending at the end",
				st.HelloReceived, st.HandshakesOpened, st.HandshakesEvicted, st.HandshakesExpired, st.HelloBusy,
				st.TakeoverRefused, fp.Pending)
		})
	}
}

// TestForgedRepairSurvived (C7 f, C8, C12; E56): between a real CSF and CRF, a forged
// copy of a REPAIR arriving first from the CSF's address, or a REPAIR corrupted once on the link,
// costs its block nothing: nothing wrong is delivered, and the block is restored from the
// genuine symbol, a surplus one, or the coded retransmission it asks for.
func TestForgedRepairSurvived(t *testing.T) {
	for _, forge := range []bool{true, false} {
		p := establishedPair(t, 3, 4, 1)
		done := false
		p.Link.Filter = func(pk *cremtest.Packet) cremtest.Fate {
			if pk.Kind == cremtest.RDMA && pk.Dir == cremtest.Forward && pk.N == 1 {
				return cremtest.Fate{Drop: true}
			}
			if !done && pk.Kind == cremtest.CREM && pk.Dir == cremtest.Forward && pk.Data[0]&0x0f == byte(wire.TypeRepair) {
				done = true
				bad := append([]byte(nil), pk.Data...)
				bad[len(bad)-300] ^= 0x10
				if !forge {
					pk.Data = bad // corrupted on the link: the genuine one never arrives
					return cremtest.Fate{}
				}
				p.Inject(cremtest.Forward, p.CSFAddr, bad) // a forged copy, ahead of the genuine one
				return cremtest.Fate{Delay: 100 * time.Microsecond}
			}
			return cremtest.Fate{}
		}
		for range 4 {
			p.Send(p.Synth.Next(500))
		}
		p.RunFor(100 * time.Millisecond)
		st := p.Receiver.Stats().Flows
		o := p.Outcomes[1]
		if st.ICRCMismatch == 0 || st.BlocksRescued != 1 || o == nil || o.Restored != 1 || o.Wrong != 0 || o.Abandoned != 0 {
			t.Fatalf("forged %v: outcome %+v\n%+v", forge, o, st)
		}
	}
}

// establishedPair is a real CSF and CRF (cremtest.Pair) with the seed, a fixed Cauchy k, m and
// no adaptation, run until the CSF's configuration is acknowledged.
func establishedPair(t *testing.T, seed uint64, k, m int) *cremtest.Pair {
	t.Helper()
	p, err := cremtest.NewPair(cremtest.Config{Seed: seed,
		Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, k, m, 0), csf.WithAdaptation(false)}})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	p.RunFor(20 * time.Millisecond)
	if _, ok := p.Sender.Config(); !ok {
		t.Fatal("not established")
	}
	return p
}
