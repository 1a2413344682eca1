package udp

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
)

// The one real-socket test of the package: two QPs sharing one socket on 127.0.0.1 move a
// WRITE, a SEND and a READ through a lossy, delayed in-process impairment, byte for byte.
func TestLoopbackSharedSocket(t *testing.T) {
	h, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		t.Skipf("no UDP on loopback: %v", err)
	}
	defer h.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	mk := func(qpn, peer uint32, port, peerPort uint16) *rc.QP {
		q, err := rc.NewQP(rc.Config{QPN: qpn, RemoteQPN: peer, SendPSN: 5, RecvPSN: 5, MTU: 1024,
			Mode: rc.ModeTCAETH, Rate: 1e9, RTT: 3 * time.Millisecond, Burst: time.Millisecond,
			LocalAddr: lo, RemoteAddr: lo, LocalPort: port, RemotePort: peerPort})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	a, b := mk(0x100, 0x200, 50000, 50001), mk(0x200, 0x100, 50001, 50000)
	mem := make([]byte, 1<<20)
	for i := range mem[512<<10:] {
		mem[512<<10+i] = byte(i * 7)
	}
	mr, _ := b.RegisterMR(mem, rc.AccessRemoteWrite|rc.AccessRemoteRead)
	recvBuf := make([]byte, 64<<10)
	b.PostRecv(rc.RecvWR{ID: 1, Buf: recvBuf})
	done := make(chan rc.Completion, 16)
	imp := func(seed uint64) *netem.Config {
		l, _ := netem.NewBernoulli(0.02, seed)
		return &netem.Config{Delay: time.Millisecond, Loss: l}
	}
	ca, err := h.Add(a, h.LocalAddr(), imp(1), func(c rc.Completion) { done <- c })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Add(b, h.LocalAddr(), imp(2), func(c rc.Completion) { done <- c }); err != nil {
		t.Fatal(err)
	}
	wdata := bytes.Repeat([]byte("write me "), 40000)
	sdata := bytes.Repeat([]byte("send "), 10000)
	rdata := make([]byte, 200000)
	ca.Do(func(q *rc.QP) {
		q.PostSend(rc.SendWR{ID: 1, Op: rc.OpWrite, Local: wdata, RemoteAddr: mr.Addr, RKey: mr.RKey})
		q.PostSend(rc.SendWR{ID: 2, Op: rc.OpSend, Local: sdata})
		q.PostSend(rc.SendWR{ID: 3, Op: rc.OpRead, Local: rdata, RemoteAddr: mr.Addr + 512<<10, RKey: mr.RKey})
	})
	got := 0
	deadline := time.After(20 * time.Second)
	for got < 4 {
		select {
		case c := <-done:
			if c.Status != rc.StatusSuccess {
				t.Fatalf("completion %+v", c)
			}
			got++
		case <-deadline:
			t.Fatalf("%d of 4 completions; A %+v B %+v", got, a.Stats(), b.Stats())
		}
	}
	ca.Do(func(*rc.QP) {})
	if !bytes.Equal(mem[:len(wdata)], wdata) || !bytes.Equal(recvBuf[:len(sdata)], sdata) ||
		!bytes.Equal(rdata, mem[512<<10:512<<10+len(rdata)]) {
		t.Fatal("data differs")
	}
	if c := ca.Counts(); c.Sent == 0 {
		t.Fatal("nothing counted")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestCloseTwice: Close may be called again, and from several goroutines at once: no
// panic, every call returns once the host has stopped, and every call reports the pcap's error
// (a second call used to return nil).
func TestCloseTwice(t *testing.T) {
	h, err := Listen("127.0.0.1:0", Options{Pcap: failingWriter{}})
	if err != nil {
		t.Skipf("no UDP on loopback: %v", err)
	}
	if err := h.Close(); err == nil {
		t.Fatal("Close: want the pcap's error")
	}
	if err := h.Close(); err == nil {
		t.Fatal("Close again: want the pcap's error again")
	}
	for range 20 {
		h, err := Listen("127.0.0.1:0", Options{Pcap: failingWriter{}})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- h.Close() }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err == nil {
				t.Fatal("a concurrent Close returned no error")
			}
		}
	}
}
