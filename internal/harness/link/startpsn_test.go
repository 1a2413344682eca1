package link

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
)

// startPSNs are the initial PSNs real deployments may draw (at random over the 24-bit space):
// the bottom, both sides of the half-space boundary that serial arithmetic turns on, and just
// below the wrap, where every transfer below crosses from 0xffffff to 0.
var startPSNs = []psn.PSN{0x000000, 0x7fffff, 0x800000, 0xfffff0}

// runAt moves one operation's messages from A to B (READ: B's memory to A) with A's first
// PSN at start, over a 2 ms path with loss each way, and checks every byte. B's own requests
// (none are posted) would start half the space away.
func runAt(t *testing.T, mode rc.Mode, noNAK bool, op rc.Op, start psn.PSN, loss float64, sizes []int, seed uint64) (rc.Stats, time.Duration) {
	t.Helper()
	p := newPair(t, setup{mode: mode, noNAK: noNAK, mtu: 1024, rate: 1e9, delay: time.Millisecond, loss: loss, seed: seed,
		tweak: func(c *rc.Config) {
			c.SkipICRC = true // the PSN arithmetic is under test here, not the CRC
			if c.QPN == 0x11 {
				c.SendPSN, c.RecvPSN = start, start.Add(psn.Modulus/2)
			} else {
				c.SendPSN, c.RecvPSN = start.Add(psn.Modulus/2), start
			}
		}})
	a, b := p.QP[0], p.QP[1]
	total := 0
	for _, s := range sizes {
		total += s
	}
	rng := rand.New(rand.NewPCG(seed, uint64(start)))
	mem := make([]byte, total)
	if op == rc.OpRead {
		fill(rng, mem)
	}
	mr, err := b.RegisterMR(mem, rc.AccessRemoteWrite|rc.AccessRemoteRead|rc.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	local := make([][]byte, len(sizes))
	off := 0
	for i, s := range sizes {
		local[i] = make([]byte, s)
		if op != rc.OpRead {
			fill(rng, local[i])
		}
		if op == rc.OpSend {
			if err := b.PostRecv(rc.RecvWR{ID: uint64(i), Buf: mem[off : off+s]}); err != nil {
				t.Fatal(err)
			}
		}
		wr := rc.SendWR{ID: uint64(i), Op: op, Local: local[i], RKey: mr.RKey, RemoteAddr: mr.Addr + uint64(off)}
		if err := a.PostSend(wr); err != nil {
			t.Fatalf("post %v of %d octets at %v: %v", op, s, start, err)
		}
		off += s
	}
	var c poll
	err = p.RunUntil(func() bool { c.collect(p); return len(c.a) == len(sizes) || a.Err() != nil }, 120*time.Second)
	if err == nil && a.Err() != nil {
		err = a.Err()
	}
	if err != nil {
		t.Fatalf("%v; %d of %d completed; A %+v; B %+v", err, len(c.a), len(sizes), a.Stats(), b.Stats())
	}
	off = 0
	for i, s := range sizes {
		if c.a[i].ID != uint64(i) || c.a[i].Status != rc.StatusSuccess {
			t.Fatalf("completion %d: %+v", i, c.a[i])
		}
		if !bytes.Equal(local[i], mem[off:off+s]) {
			t.Fatalf("%v %d (%d octets) differs", op, i, s)
		}
		off += s
	}
	if op == rc.OpSend {
		n := 0
		for _, x := range c.b {
			if x.Kind == rc.KindRecv {
				if x.Status != rc.StatusSuccess || x.ID != uint64(n) || x.Len != sizes[n] {
					t.Fatalf("receive %d: %+v", n, x)
				}
				n++
			}
		}
		if n != len(sizes) {
			t.Fatalf("%d receives, want %d", n, len(sizes))
		}
	}
	return a.Stats(), p.Now
}

// Every mode is correct wherever the PSN space starts (initial PSNs are random over
// the 24-bit space): WRITE, SEND and READ from 0x000000, 0x7fffff, 0x800000 and 0xfffff0 (each
// run crosses the wrap from there), without and with 1 percent loss each way, byte for byte.
// The READs include one of 64 MiB at MTU 1024, 65 536 PSNs: four times the send buffer and the
// receive window (16 384 PSNs each), which the requester must accept and the responder answer.
func TestAnyStartPSN(t *testing.T) {
	ops := []struct {
		op    rc.Op
		sizes []int
	}{
		{rc.OpWrite, []int{1, 4096, 1 << 20, 300 << 10, 1 << 20}},
		{rc.OpSend, []int{0, 1025, 256 << 10, 512 << 10}},
		{rc.OpRead, []int{1, 64 << 10, 64 << 20, 100 << 10, 2 << 20}},
	}
	for _, m := range modes {
		for _, o := range ops {
			for _, start := range startPSNs {
				for _, loss := range []float64{0, 0.01} {
					name := fmt.Sprintf("%s/%v/%#06x/loss=%v", m.name, o.op, uint32(start), loss)
					t.Run(name, func(t *testing.T) {
						st, took := runAt(t, m.mode, m.noNAK, o.op, start, loss, o.sizes, 11)
						t.Logf("%v: data %d retx %d (timeout %d)", took, st.DataPackets, st.RetransmittedPackets, st.TimeoutRetransmissions)
						if loss == 0 && st.RetransmittedPackets != 0 {
							t.Errorf("no loss, %d retransmissions", st.RetransmittedPackets)
						}
					})
				}
			}
		}
	}
}

// fill puts random octets from rng's next value in b.
func fill(rng *rand.Rand, b []byte) {
	var seed [32]byte
	for k := range 4 {
		v := rng.Uint64()
		for j := range 8 {
			seed[8*k+j] = byte(v >> (8 * j))
		}
	}
	rand.NewChaCha8(seed).Read(b)
}
