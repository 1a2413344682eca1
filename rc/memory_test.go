package rc

import (
	"runtime"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// The responder's out-of-order window costs nothing until a packet arrives out of order, then
// 2 octets per PSN of window while nothing is buffered (protocol notes R18); a WRITE packet
// placed out of order adds nothing. Measured around a window of 2^22 - 1 PSNs, the largest the
// simulator uses.
func TestResponderMemoryPerPSN(t *testing.T) {
	for _, mode := range []Mode{ModeSR, ModeTCAETH} {
		cfg := testCfg(mode)
		cfg.RecvWindow = psn.Modulus/4 - 1
		before := heapInUse()
		q := newTestQP(t, cfg)
		idle := heapInUse() - before
		if idle > 64<<10 {
			t.Errorf("%v: a QP whose window was never used costs %d octets", mode, idle)
		}
		region := make([]byte, 64<<20)
		mr, err := q.RegisterMR(region, AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		pr := peerOf(q)
		payload := make([]byte, 1024)
		reth := roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: uint32(len(region))}
		base := heapInUse()
		// The FIRST is lost: the message's next packets wait in the buffer until it comes.
		q.Handle(0, pr.write(t, roce.OpWriteMiddle, cfg.RecvPSN.Add(1), roce.RETH{}, payload, false))
		// A second message's FIRST and a packet of it far ahead are placed at once.
		far := cfg.RecvPSN.Add(1 << 20)
		q.Handle(0, pr.write(t, roce.OpWriteFirst, far, reth, payload, false))
		q.Handle(0, pr.write(t, roce.OpWriteMiddle, far.Add(1000), roce.RETH{}, payload, false))
		drain(t, q)
		if st := q.Stats(); st.PlacedOutOfOrder != 2 || st.OutOfOrderPackets != 3 {
			t.Fatalf("%v: %+v", mode, st)
		}
		used := heapInUse() - base
		perPSN := float64(used) / float64(cfg.RecvWindow)
		t.Logf("%v: window of %d PSNs: %d octets, %.2f per PSN", mode, cfg.RecvWindow, used, perPSN)
		if perPSN > 4 {
			t.Errorf("%v: %.2f octets per PSN of window, want at most 4", mode, perPSN)
		}
		runtime.KeepAlive(q)
	}
}

// The requester keeps 24 octets for each PSN it has sent and not had acknowledged, and no
// pointer the garbage collector scans: 2^21 PSNs (an 8 GiB WRITE at MTU 4096) cost 48 MiB.
func TestSendBufferMemoryPerPSN(t *testing.T) {
	const n = 1 << 21
	cfg := testCfg(ModeTCAETH)
	cfg.MTU, cfg.Rate, cfg.PeerRate, cfg.SendBuffer, cfg.ReuseBuffers, cfg.SkipICRC = 256, 400e9, 400e9, n, true, true
	q := newTestQP(t, cfg)
	// Pages of the message that are only read are never made resident.
	msg := make([]byte, n*cfg.MTU)
	base := heapInUse()
	if err := q.PostSend(SendWR{Op: OpWrite, Local: msg}); err != nil {
		t.Fatal(err)
	}
	sent := 0
	var now time.Duration
	for sent < n {
		q.Tick(now)
		now, _ = q.NextDeadline()
		k := 0
		q.Drain(func([]byte) { k++ })
		if k == 0 {
			t.Fatalf("sent %d of %d: %+v", sent, n, q.Stats())
		}
		sent += k
	}
	if q.req.tx.len() != n {
		t.Fatalf("send buffer holds %d, want %d", q.req.tx.len(), n)
	}
	used := heapInUse() - base
	perPSN := float64(used) / n
	t.Logf("send buffer of %d PSNs: %d octets, %.2f per PSN", n, used, perPSN)
	if perPSN > 26 {
		t.Errorf("%.2f octets per unacknowledged PSN, want at most 26", perPSN)
	}
	runtime.KeepAlive(msg)
	runtime.KeepAlive(q)
}

// With every one of the maxWrites places for WRITE messages known out of order taken, a WRITE
// executed in order is not entered; its later packets arriving out of order wait in the buffer
// and are executed in their turn, byte-exact.
func TestWritesTableFull(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	cfg.RecvWindow = 4096
	q := newTestQP(t, cfg)
	region := make([]byte, 4*1024)
	mr, err := q.RegisterMR(region, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	pr := peerOf(q)
	pl := make([]byte, 1024)
	// FIRSTs of messages far ahead, each placed at once, take every place.
	for i := range maxWrites {
		reth := roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 2 * 1024}
		q.Handle(0, pr.write(t, roce.OpWriteFirst, cfg.RecvPSN.Add(1000+2*i), reth, pl, false))
	}
	if st := q.Stats(); st.PlacedOutOfOrder != maxWrites {
		t.Fatalf("placed %d, want %d", st.PlacedOutOfOrder, maxWrites)
	}
	msg := make([]byte, 4*1024)
	for i := range msg {
		msg[i] = byte(i/1024 + 1)
	}
	reth := roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 4 * 1024}
	p := cfg.RecvPSN
	q.Handle(0, pr.write(t, roce.OpWriteFirst, p, reth, msg[:1024], false))
	q.Handle(0, pr.write(t, roce.OpWriteLast, p.Add(3), roce.RETH{}, msg[3072:], true))
	q.Handle(0, pr.write(t, roce.OpWriteMiddle, p.Add(2), roce.RETH{}, msg[2048:3072], false))
	q.Handle(0, pr.write(t, roce.OpWriteMiddle, p.Add(1), roce.RETH{}, msg[1024:2048], false))
	if string(region) != string(msg) {
		t.Fatal("message misplaced")
	}
	if st := q.Stats(); st.PlacedOutOfOrder != maxWrites || st.RequestsReceived != maxWrites+4 {
		t.Fatalf("%+v", st)
	}
	drain(t, q)
}
