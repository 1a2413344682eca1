package rc

import (
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// directPair is a requester A and a responder B wired back to back in virtual time: what one
// sends the other handles at the same instant, and time jumps to the next deadline.
type directPair struct {
	a, b *QP
	now  time.Duration
	toA  func([]byte)
	toB  func([]byte)
	pkts uint64 // packets A sent
}

func benchCfgs(mode Mode, fast bool) (a, b Config) {
	a = Config{QPN: 0x11, RemoteQPN: 0x22, SendPSN: 1000, RecvPSN: 5000, MTU: 4096, Mode: mode,
		Rate: 400e9, RTT: 25 * time.Millisecond, RTO: 75 * time.Millisecond,
		SendBuffer: 1 << 16, RecvWindow: 64, SkipICRC: fast, ReuseBuffers: fast,
		LocalAddr: netip.MustParseAddr("192.0.2.1"), RemoteAddr: netip.MustParseAddr("192.0.2.2"),
		LocalPort: 49152, RemotePort: 49153}
	b = a
	b.QPN, b.RemoteQPN, b.SendPSN, b.RecvPSN = a.RemoteQPN, a.QPN, a.RecvPSN, a.SendPSN
	b.LocalAddr, b.RemoteAddr, b.LocalPort, b.RemotePort = a.RemoteAddr, a.LocalAddr, a.RemotePort, a.LocalPort
	b.SendBuffer, b.RecvWindow = 64, 1<<16
	return a, b
}

func newDirectPair(tb testing.TB, ca, cb Config) *directPair {
	p := &directPair{a: newTestQP(tb, ca), b: newTestQP(tb, cb)}
	p.toB = func(pkt []byte) { p.pkts++; p.b.Handle(p.now, pkt) }
	p.toA = func(pkt []byte) { p.a.Handle(p.now, pkt) }
	return p
}

// run steps until A has no request pending.
func (p *directPair) run(tb testing.TB) {
	for p.a.Pending() > 0 {
		p.a.Tick(p.now)
		p.b.Tick(p.now)
		p.a.Drain(p.toB)
		p.b.Drain(p.toA)
		p.a.Drain(p.toB)
		d, ok := p.a.NextDeadline()
		if d2, ok2 := p.b.NextDeadline(); ok2 && (!ok || d2 < d) {
			d, ok = d2, true
		}
		if !ok {
			if p.a.Pending() > 0 {
				tb.Fatalf("idle with %d requests pending; stats %+v", p.a.Pending(), p.a.Stats())
			}
			return
		}
		p.now = max(p.now, d)
	}
}

// BenchmarkWritePath measures a 4 KiB-MTU RDMA WRITE packet's whole path through rc: the
// requester builds it, the responder handles and places it, and the ACKs go back, on two QPs
// wired back to back at 400 Gbit/s. Each op is one 16 MiB WRITE (4096 packets); ns/packet and
// allocs/packet are per WRITE packet. "default" seals and verifies every ICRC and gives the
// driver a fresh buffer per packet; "fast" is SkipICRC and ReuseBuffers, as a simulator runs.
func BenchmarkWritePath(b *testing.B) {
	const size = 16 << 20
	for _, mode := range []Mode{ModeTCAETH, ModeSR, ModeGBN} {
		for _, fast := range []bool{false, true} {
			name := mode.String() + "/" + map[bool]string{false: "default", true: "fast"}[fast]
			b.Run(name, func(b *testing.B) {
				ca, cb := benchCfgs(mode, fast)
				p := newDirectPair(b, ca, cb)
				src := make([]byte, size)
				for i := range src {
					src[i] = byte(i * 7)
				}
				dst := make([]byte, size)
				mr, err := p.b.RegisterMR(dst, AccessRemoteWrite)
				if err != nil {
					b.Fatal(err)
				}
				post := func() {
					if err := p.a.PostSend(SendWR{Op: OpWrite, Local: src, RemoteAddr: mr.Addr, RKey: mr.RKey}); err != nil {
						b.Fatal(err)
					}
				}
				post() // warm up: the first message sizes the buffers
				p.run(b)
				p.a.PollCompletions(nil)
				p.pkts = 0
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				st := time.Now()
				for b.Loop() {
					post()
					p.run(b)
					p.a.PollCompletions(nil)
				}
				el := time.Since(st)
				runtime.ReadMemStats(&m1)
				b.ReportMetric(float64(el.Nanoseconds())/float64(p.pkts), "ns/packet")
				b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(p.pkts), "allocs/packet")
				b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(p.pkts), "B/packet")
				if string(dst[:4096]) != string(src[:4096]) || string(dst[size-4096:]) != string(src[size-4096:]) {
					b.Fatal("data not placed")
				}
			})
		}
	}
}
