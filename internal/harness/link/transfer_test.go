package link

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/rc"
)

var modes = []struct {
	name  string
	mode  rc.Mode
	noNAK bool
}{
	{"gbn", rc.ModeGBN, false},
	{"sr", rc.ModeSR, false},
	{"sr-rto", rc.ModeSR, true},
	{"tcaeth", rc.ModeTCAETH, false},
}

// Byte-exact transfers of random messages, every operation, in every mode, over a path with
// random loss up to 10 percent in both directions, delay and reordering, in virtual time.
func TestRandomTransfersAllModes(t *testing.T) {
	for _, m := range modes {
		for _, loss := range []float64{0, 0.01, 0.1} {
			for _, reorder := range []float64{0, 0.02} {
				name := fmt.Sprintf("%s/loss=%v/reorder=%v", m.name, loss, reorder)
				t.Run(name, func(t *testing.T) {
					runRandom(t, setup{mode: m.mode, noNAK: m.noNAK, mtu: 1024, rate: 1e9,
						delay: 2 * time.Millisecond, loss: loss, reorder: reorder, seed: uint64(loss*1000) + 7})
				})
			}
		}
	}
}

type expect struct {
	op   rc.Op
	data []byte // what was sent, or where READ data and atomic results land
	off  int    // remote offset
	want []byte // READ: the remote data; atomics: the original value
}

func runRandom(t *testing.T, s setup) {
	p := newPair(t, s)
	a, b := p.QP[0], p.QP[1]
	rng := rand.New(rand.NewPCG(s.seed, 99))
	const writeArea, readArea, atomArea = 1 << 20, 1 << 20, 64
	mem := make([]byte, writeArea+readArea+atomArea)
	copy(mem[writeArea:], randBytes(rng, readArea))
	mr, err := b.RegisterMR(mem, rc.AccessRemoteWrite|rc.AccessRemoteRead|rc.AccessRemoteAtomic|rc.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	var sends []expect
	var recvWant, recvBufs [][]byte
	woff := 0
	var atom [8]uint64
	const n = 60
	for i := range n {
		op := rc.Op(rng.IntN(7))
		size := []int{0, 1, 100, 1024, 1025, 3000, 8192, 20000}[rng.IntN(8)]
		e := expect{op: op}
		wr := rc.SendWR{ID: uint64(i), Op: op, RKey: mr.RKey, Imm: rng.Uint32()}
		switch op {
		case rc.OpSend, rc.OpSendImm:
			e.data = randBytes(rng, size)
			buf := make([]byte, 20000)
			recvWant, recvBufs = append(recvWant, e.data), append(recvBufs, buf)
			if err := b.PostRecv(rc.RecvWR{ID: uint64(len(recvBufs) - 1), Buf: buf}); err != nil {
				t.Fatal(err)
			}
		case rc.OpWrite, rc.OpWriteImm:
			if woff+size > writeArea {
				t.Fatal("write area too small")
			}
			e.data, e.off = randBytes(rng, size), woff
			woff += size
			wr.RemoteAddr = mr.Addr + uint64(e.off)
			if op == rc.OpWriteImm {
				if err := b.PostRecv(rc.RecvWR{ID: 1 << 20}); err != nil {
					t.Fatal(err)
				}
			}
		case rc.OpRead:
			e.off = writeArea + rng.IntN(readArea-size)
			e.data = make([]byte, size)
			e.want = mem[e.off : e.off+size]
			wr.RemoteAddr = mr.Addr + uint64(e.off)
		case rc.OpFetchAdd, rc.OpCompareSwap:
			k := rng.IntN(8)
			e.off = writeArea + readArea + 8*k
			e.data = make([]byte, 8)
			wr.RemoteAddr = mr.Addr + uint64(e.off)
			wr.SwapAdd, wr.Compare = rng.Uint64N(100), atom[k]
			e.want = binary.LittleEndian.AppendUint64(nil, atom[k])
			if op == rc.OpFetchAdd {
				atom[k] += wr.SwapAdd
			} else {
				atom[k] = wr.SwapAdd
			}
		}
		wr.Local = e.data
		if err := a.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		sends = append(sends, e)
	}
	var c poll
	err = p.RunUntil(func() bool { c.collect(p); return len(c.a) == n }, 300*time.Second)
	if err != nil {
		t.Fatalf("%v; A: %d completions; A %+v; B %+v", err, len(c.a), a.Stats(), b.Stats())
	}
	for i, comp := range c.a {
		if comp.ID != uint64(i) || comp.Status != rc.StatusSuccess {
			t.Fatalf("completion %d: %+v (err %v)", i, comp, a.Err())
		}
	}
	for i, e := range sends {
		var got, want []byte
		switch e.op {
		case rc.OpWrite, rc.OpWriteImm:
			got, want = mem[e.off:e.off+len(e.data)], e.data
		case rc.OpRead, rc.OpFetchAdd, rc.OpCompareSwap:
			got, want = e.data, e.want
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("request %d: %v of %d octets differs", i, e.op, len(want))
		}
	}
	var recvs []rc.Completion
	for _, comp := range c.b {
		if comp.Status != rc.StatusSuccess {
			t.Fatalf("B completion %+v", comp)
		}
		if comp.Kind == rc.KindRecv {
			recvs = append(recvs, comp)
		}
	}
	if len(recvs) != len(recvWant) {
		t.Fatalf("B got %d SENDs, want %d", len(recvs), len(recvWant))
	}
	for i, comp := range recvs {
		if comp.ID != uint64(i) || !bytes.Equal(recvBufs[i][:comp.Len], recvWant[i]) {
			t.Fatalf("SEND %d: %d octets differ from the %d sent", i, comp.Len, len(recvWant[i]))
		}
	}
	for i := range atom {
		if v := binary.LittleEndian.Uint64(mem[writeArea+readArea+8*i:]); v != atom[i] {
			t.Fatalf("atomic word %d = %d, want %d", i, v, atom[i])
		}
	}
	st := a.Stats()
	t.Logf("virtual %v: A data %d retx %d (timeout %d) B acks %d naks %d; dropped A->B %d B->A %d",
		p.Now, st.DataPackets, st.RetransmittedPackets, st.TimeoutRetransmissions,
		b.Stats().AckPackets, b.Stats().NAKPackets, p.Counts[A].Dropped, p.Counts[B].Dropped)
}
