package pairing

import (
	"testing"
	"time"

	"github.com/crem-project/crem/internal/fuzzcorpus"
	"github.com/crem-project/crem/roce"
)

// FuzzLearner: any sequence of packets in either direction (cut from the input, 40 octets or
// fewer each, a few QPs and PSNs) never panics, keeps the tables within their bounds (flows,
// probation, candidates and blocked QPs; paired ones are at most the flows), and never
// offers a packet to a flow its QP is not paired with.
func FuzzLearner(f *testing.F) {
	f.Add([]byte{0x0a, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 1, 0x11, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 1})
	mad, _ := roce.CMReq{LocalCommID: 1, LocalQPN: 6}.AppendMAD(nil, 1)
	req, _ := roce.AppendGSIPacket(nil, 0xffff, 0, mad)
	f.Add(req)
	// The real capture's packets in order, each cut to the input's 40-octet chunks (read in
	// place, never copied into the repository).
	if pkts, err := fuzzcorpus.RealRoCEv2(); err == nil {
		var in []byte
		for i, p := range pkts {
			c := p[:min(len(p), 40)]
			in = append(append(in, byte(len(c)-1)), c...)
			if i%16 == 15 {
				f.Add(in)
				in = nil
			}
		}
		f.Add(in)
	} else {
		f.Logf("real capture not used: %v", err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		x := newLearner(t, func(l *Limits) { l.MaxFlows, l.MaxProbation, l.MaxCandidates, l.MaxBlocked, l.Confirm = 4, 4, 2, 4, 2 })
		now := time.Duration(0)
		for len(b) > 0 {
			n := int(b[0]%40) + 1
			b = b[1:]
			if n > len(b) {
				n = len(b)
			}
			pkt := b[:n]
			b = b[n:]
			now += time.Duration(n) * time.Second / 7
			if n > 0 && pkt[0]&1 == 0 {
				x.Forward(now, hostA, hostB, pkt)
			} else if k, ok := x.Reverse(now, hostB, hostA, pkt); ok {
				if qp, paired := x.ReverseQP(k); !paired || qp != destQP(pkt) {
					t.Fatalf("offered to %v, paired with %#x %v", k, qp, paired)
				}
			}
			if flows, rev, pend := x.Tables(); flows > 4 || rev > 4+2+4+4 || pend > 4096 {
				t.Fatalf("tables %d %d %d", flows, rev, pend)
			}
			if now > 5*time.Second {
				x.Expire(now)
			}
		}
	})
}
