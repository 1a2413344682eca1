package link

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/rc"
)

// runReads posts n READs of size octets at once (as crem perf read keeps them in flight) and
// checks every one completes successfully and byte-exact.
func runReads(t *testing.T, s setup, n, size int) (a, b rc.Stats, p *Pair) {
	t.Helper()
	p = newPair(t, s)
	qa, qb := p.QP[0], p.QP[1]
	rng := rand.New(rand.NewPCG(s.seed, 5))
	mem := randBytes(rng, n*size)
	mr, err := qb.RegisterMR(mem, rc.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([][]byte, n)
	for i := range n {
		dst[i] = make([]byte, size)
		wr := rc.SendWR{ID: uint64(i), Op: rc.OpRead, Local: dst[i], RKey: mr.RKey, RemoteAddr: mr.Addr + uint64(i*size)}
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	var c poll
	err = p.RunUntil(func() bool { c.collect(p); return len(c.a) == n || qa.Err() != nil }, 120*time.Second)
	if err == nil && qa.Err() != nil {
		err = qa.Err()
	}
	if err != nil {
		t.Fatalf("%v; A: %d completions; A %+v; B %+v", err, len(c.a), qa.Stats(), qb.Stats())
	}
	for i, comp := range c.a {
		if comp.ID != uint64(i) || comp.Status != rc.StatusSuccess {
			t.Fatalf("completion %d: %+v (err %v)", i, comp, qa.Err())
		}
		if !bytes.Equal(dst[i], mem[i*size:(i+1)*size]) {
			t.Fatalf("READ %d differs", i)
		}
	}
	a, b = qa.Stats(), qb.Stats()
	t.Logf("virtual %v: A read requests %d retx %d (timeout %d, timeouts %d) responses %d; B reads %d dup %d responses resent %d; dropped A->B %d B->A %d",
		p.Now, a.DataPackets, a.RetransmittedPackets, a.TimeoutRetransmissions, a.Timeouts,
		a.ReadResponsesReceived, b.ReadsExecuted, b.DuplicateReads, b.RetransmittedPackets, p.Counts[A].Dropped, p.Counts[B].Dropped)
	return a, b, p
}

// Large READs recover from loss in every mode (IBTA's READ retry, T9; protocol notes R16, R17):
// 16 READs of 4 MiB in flight, MTU 4096, 1 percent loss each way, 20 ms RTT, 400 Mbit/s, as
// `crem perf read` runs them, byte-exact. sr and tcaeth resend about the responses lost and
// finish close to the time the rate needs (1.34 s); gbn resends each READ from its first lost
// response on. With a retry count of 1 they still complete: a READ that progresses resets it.
func TestLargeReadsRecoverFromLoss(t *testing.T) {
	for _, m := range modes {
		for _, seed := range []uint64{1, 2} {
			for _, retry := range []int{7, 1} {
				t.Run(fmt.Sprintf("%s/seed=%d/retry=%d", m.name, seed, retry), func(t *testing.T) {
					a, b, p := runReads(t, setup{mode: m.mode, noNAK: m.noNAK, mtu: 4096, rate: 400e6,
						delay: 10 * time.Millisecond, loss: 0.01, seed: seed,
						tweak: func(c *rc.Config) { c.RetryCount = retry }}, 16, 4<<20)
					lost := p.Counts[B].Dropped
					if a.ReadResponsesReceived != 16*1024 {
						t.Errorf("%d responses taken, want %d", a.ReadResponsesReceived, 16*1024)
					}
					if m.mode != rc.ModeGBN && (b.RetransmittedPackets > lost+lost/10+8 || p.Now > 1600*time.Millisecond) {
						t.Errorf("%d responses resent for %d lost, %v", b.RetransmittedPackets, lost, p.Now)
					}
					if m.mode == rc.ModeGBN && p.Now > 8*time.Second {
						t.Errorf("gbn took %v", p.Now)
					}
				})
			}
		}
	}
}

// Without loss a READ's responses take as long as the rate needs; the retry timer runs from the
// last response received, so nothing is retransmitted.
func TestLargeReadsNoSpuriousRetransmissions(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a, b, _ := runReads(t, setup{mode: m.mode, noNAK: m.noNAK, mtu: 4096, rate: 400e6,
				delay: 10 * time.Millisecond, seed: 3}, 16, 1<<20)
			if a.RetransmittedPackets != 0 || a.Timeouts != 0 || b.DuplicateReads != 0 {
				t.Fatalf("no loss: %d retransmissions, %d timeouts, %d duplicate READs",
					a.RetransmittedPackets, a.Timeouts, b.DuplicateReads)
			}
		})
	}
}
