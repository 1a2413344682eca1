package gateway_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
	"github.com/crem-project/crem/wire"
	"golang.org/x/net/ipv4"
)

// liveHeap returns the heap live at the end of the latest collection (after one, with collect).
func liveHeap(collect bool) uint64 {
	if collect {
		runtime.GC()
		debug.FreeOSMemory()
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestHostileTraffic: a gateway pair in relay mode on loopback (4 RC queue pairs, 2
// percent loss each way on a 2 ms path) carries a verified transfer (a 6 MiB RDMA WRITE and a
// 6 MiB RDMA READ per QP) while both gateways take about 24,000 hostile datagrams a second, at
// most 400,000 and 20 s, from 32 spoofed addresses: empty and garbage datagrams, malformed CREM
// messages, HELLOs for new descriptors and HELLOs with the live flows' own descriptors, CLOSE and
// REPAIR with the live flows' Flow IDs, PATH_REPORTs from an address not in reporters; and, on
// the path, REPAIRs with forged symbols from the handshake address, ahead of the genuine ones
// (one for one REPAIR in four: the next Repair Index of the block, or the next block). The flows are established, and the engines' windows filled, before the
// attack (a first 4 MiB WRITE and READ). The test checks that every byte arrives as written; that
// no CLOSE is taken, no session started anew and no flow taken over (each CRF flow saw every
// source of both transfers; the CRFs restore packets of every WRITE, of the READs, and in both
// halves of the attack); that the packet buffers and the tables stay
// within their bounds, the buffers return to within 1.5x of what they were before, and the heap
// stays within what those bounds allow; and that the counters account for every datagram: per
// socket, received = handed on + dropped; what was sent to a CREM socket was received or dropped
// by the kernel (counted); the kinds that carry nothing valid are counted where they are refused
// (router, CRF, CSF), spoofed CLOSE and REPAIR as from the wrong source, PATH_REPORTs as rejected.
//
// The checks run as subtests: one per hostile kind (hostileKinds: what it must have caused,
// where it is refused) and one per property of the whole (the transfer, the sessions, the
// accounting, the bounds).
//
// The takeover (a HELLO with a live descriptor), the flood's lock-out of new flows and the
// forged REPAIRs are the CRF's to survive.
func TestHostileTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("a transfer through two gateways under a flood")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CREM_HOSTILE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (CREM_HOSTILE_SEED replays it)", seed)
	nQP, size, hostileRate := 4, 6<<20, 24000
	if testenv.Race {
		nQP, size, hostileRate = 2, 4<<20, 4000 // size >= warm
	}
	const (
		mtu        = 4096
		rtt        = 2 * time.Millisecond
		rate       = 1e9
		maxHostile = 400_000
		maxAttack  = 20 * time.Second
	)
	rng := rand.New(rand.NewPCG(seed, 0x11))
	p := newRelayPair(t, relaySetup{seed: seed, loss: "0.02", rate: rate, rtt: rtt, mtu: mtu, shards: 2, maxOpenBlocks: 16,
		bufferTrim: 500 * time.Millisecond})
	addrA, addrB, hostA, hostB, path, gws := p.addrA, p.addrB, p.hostA, p.hostB, p.path, p.gws
	var err error

	// The path sees the live flows' Flow IDs (in their PARAM_UPDATEs), and forges REPAIRs from
	// the handshake address ahead of the genuine ones: for one REPAIR in four it sees, one with a
	// symbol of random octets and, in turn, the same block and the next Repair Index (which the
	// CSF has yet to send: the first symbol of an index arrives forged), or the same Repair
	// Index for the next block (ahead of all its sources and REPAIRs, crf E60).
	var (
		idMu     sync.Mutex
		liveIDs  [2][]uint32 // side 0: the A->B flows' IDs (B's CRF), side 1: the B->A flows' (A's)
		attackOn atomic.Bool
		sent     [hKinds]atomic.Uint64
		toCREM   [2]atomic.Uint64 // hostile datagrams sent to each gateway's CREM socket
		sentCREM [hKinds][2]atomic.Uint64
	)
	var forgeN [2]int
	forgeRng := [2]*rand.Rand{rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 2))}
	path.tap = func(side int, b []byte) {
		if len(b) < wire.HeaderLen || b[0]>>4 != wire.Version {
			return
		}
		if wire.Type(b[0]&0x0f) == wire.TypeParamUpdate { // sent once established: a live flow's ID
			id := binary.BigEndian.Uint32(b[4:8])
			idMu.Lock()
			known := false
			for _, x := range liveIDs[side] {
				known = known || x == id
			}
			if !known {
				liveIDs[side] = append(liveIDs[side], id)
			}
			idMu.Unlock()
			return
		}
		if b[0] != wire.Version<<4|uint8(wire.TypeRepair) {
			return
		}
		m, err := wire.ParseRepair(b)
		if err != nil || m.Info || m.Retx {
			return
		}
		if !attackOn.Load() {
			return
		}
		if forgeN[side]++; forgeN[side]%4 != 0 {
			return
		}
		if forgeN[side]%8 == 0 {
			m.BlockStartPSN = m.BlockStartPSN.Add(int(m.K)) // the next block's, before any of its own
		} else {
			m.RepairIndex++ // the block's next symbol, which the CSF has not sent yet
		}
		sym := make([]byte, len(m.Symbol))
		for i := range sym {
			sym[i] = byte(forgeRng[side].Uint32())
		}
		m.Symbol = sym
		if fb, err := m.Append(nil); err == nil {
			path.inject(1-side, gws[1-side].CREMAddr(), fb)
			sent[hForgedRepair].Add(1)
			toCREM[1-side].Add(1)
			sentCREM[hForgedRepair][1-side].Add(1)
		}
	}
	path.run()

	type qpRun struct {
		qa, qb          *rc.QP
		ca, cb          *udp.Conn
		qpA, qpB        uint32
		wbuf, rbuf, mem []byte
		mr              *rc.MR
		wrote, read     bool
		err             error
	}
	var mu sync.Mutex
	var big atomic.Bool // the second WRITE and READ are posted
	done := make(chan struct{}, 2*nQP)
	warmed := make(chan struct{}, 2*nQP)
	runs := make([]*qpRun, nQP)
	used := map[uint32]bool{0: true, 1: true}
	qpn := func() uint32 {
		for {
			if q := rng.Uint32N(1 << 24); !used[q] {
				used[q] = true
				return q
			}
		}
	}
	const qpRate = 30e6                                                       // each QP's pacing: the transfer lasts a few seconds
	w := 32*(mtu+64)*8*time.Second/time.Duration(qpRate) + 2*time.Millisecond // T5: a block's span plus 2 ms
	const warm = 4 << 20                                                      // the first WRITE and READ, before the attack: the flows established, the engines' windows filled
	for i := range runs {
		r := &qpRun{qpA: qpn(), qpB: qpn()}
		runs[i] = r
		ca := rc.Config{QPN: r.qpA, RemoteQPN: r.qpB, SendPSN: psn.PSN(rng.Uint32N(psn.Modulus)), RecvPSN: psn.PSN(rng.Uint32N(psn.Modulus)),
			MTU: mtu, Mode: rc.ModeTCAETH, Rate: qpRate, RTT: rtt + time.Millisecond, Burst: time.Millisecond,
			ReorderWindow: w, RetryCount: 50, SendBuffer: 1 << 17, LocalAddr: addrA, RemoteAddr: addrB,
			LocalPort: hostA.LocalAddr().Port(), RemotePort: hostB.LocalAddr().Port()}
		cb := ca
		cb.QPN, cb.RemoteQPN, cb.SendPSN, cb.RecvPSN = r.qpB, r.qpA, ca.RecvPSN, ca.SendPSN
		cb.LocalAddr, cb.RemoteAddr, cb.LocalPort, cb.RemotePort = addrB, addrA, ca.RemotePort, ca.LocalPort
		cb.NotifyWrites = true
		if r.qa, err = rc.NewQP(ca); err != nil {
			t.Fatal(err)
		}
		if r.qb, err = rc.NewQP(cb); err != nil {
			t.Fatal(err)
		}
		r.wbuf, r.rbuf, r.mem = make([]byte, size), make([]byte, size), make([]byte, 2*size)
		fill(r.wbuf, seed, i, 0)
		fill(r.mem[size:], seed, i, 1)
		if r.mr, err = r.qb.RegisterMR(r.mem, rc.AccessRemoteWrite|rc.AccessRemoteRead|rc.AccessLocalWrite); err != nil {
			t.Fatal(err)
		}
		if r.cb, err = hostB.Add(r.qb, gws[1].RelayAddr(), nil, func(c rc.Completion) {
			if c.Kind != rc.KindWritePlaced || c.Len != size || !big.Load() {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !check(r.mem[:size], seed, i, 0) {
				r.err = fmt.Errorf("QP %d: the WRITE placed other octets than the ones sent", i)
			}
			r.wrote = true
			done <- struct{}{}
		}); err != nil {
			t.Fatal(err)
		}
		if r.ca, err = hostA.Add(r.qa, gws[0].RelayAddr(), nil, func(c rc.Completion) {
			if c.Kind != rc.KindSend {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.Status != rc.StatusSuccess:
				r.err = fmt.Errorf("QP %d: work request %d: %v (%v)", i, c.ID, c.Status, r.qa.Err())
			case c.ID <= 2:
				warmed <- struct{}{}
			case c.ID == 4:
				if !check(r.rbuf, seed, i, 1) {
					r.err = fmt.Errorf("QP %d: the READ brought other octets than the responder's", i)
				}
				r.read = true
				done <- struct{}{}
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The flows of both directions are established first.
	for _, r := range runs {
		r.ca.Do(func(q *rc.QP) {
			q.PostSend(rc.SendWR{ID: 1, Op: rc.OpWrite, Local: r.wbuf[:warm], RKey: r.mr.RKey, RemoteAddr: r.mr.Addr})
			q.PostSend(rc.SendWR{ID: 2, Op: rc.OpRead, Local: r.rbuf[:warm], RKey: r.mr.RKey, RemoteAddr: r.mr.Addr + uint64(size)})
		})
	}
	established := func() bool {
		for _, r := range runs {
			ab := flow.Key{Src: addrA, Dst: addrB, DestQP: r.qpB}
			ba := flow.Key{Src: addrB, Dst: addrA, DestQP: r.qpA}
			fa, okA := gws[0].SenderFlow(ab)
			fb, okB := gws[1].SenderFlow(ba)
			if !okA || !okB || fa.State != csf.StateEstablished || fb.State != csf.StateEstablished {
				return false
			}
		}
		idMu.Lock()
		defer idMu.Unlock()
		return len(liveIDs[0]) >= nQP && len(liveIDs[1]) >= nQP
	}
	for range 2 * nQP {
		select {
		case <-warmed:
		case <-time.After(60 * time.Second):
			t.Fatal("the first WRITE and READ did not complete in 60 s")
		}
	}
	for deadline := time.Now().Add(20 * time.Second); !established(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			for _, r := range runs {
				fa, okA := gws[0].SenderFlow(flow.Key{Src: addrA, Dst: addrB, DestQP: r.qpB})
				fb, okB := gws[1].SenderFlow(flow.Key{Src: addrB, Dst: addrA, DestQP: r.qpA})
				t.Logf("QP %#x: A's CSF %v %v %+v; B's CSF %v %v", r.qpA, okA, fa.State, fa.Stats.RepairSent, okB, fb.State)
			}
			t.Fatalf("the flows were not established in 20 s (Flow IDs seen %v)", liveIDs)
		}
	}
	before := liveHeap(true)
	base := [2]gateway.Stats{gws[0].Stats(), gws[1].Stats()}
	bufBytes := func(i int) int {
		l := gws[i].Stats().Live
		return l.BuffersSmall*512 + l.BuffersLarge*9216
	}
	bufBefore := [2]int{bufBytes(0), bufBytes(1)}

	// The attack, from 32 spoofed addresses.
	var attackers []*ipv4.PacketConn
	for i := range 32 {
		c := bindLoopback(t, netip.AddrFrom4([4]byte{127, 0, 2, byte(i + 1)}))
		defer c.Close()
		c.SetWriteBuffer(4 << 20)
		attackers = append(attackers, ipv4.NewPacketConn(c))
	}
	env := hostileEnv{gws: gws, addrA: addrA, addrB: addrB, mtu: mtu}
	for _, r := range runs {
		env.qpA, env.qpB = append(env.qpA, r.qpA), append(env.qpB, r.qpB)
	}
	stopAttack := make(chan struct{})
	attackDone := make(chan struct{})
	attackStart := time.Now()
	attackOn.Store(true)
	go func() {
		defer close(attackDone)
		defer attackOn.Store(false)
		arng := rand.New(rand.NewPCG(seed, 3))
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var ms []ipv4.Message
		for total, batch := 0, 0; total < maxHostile && time.Since(attackStart) < maxAttack; batch++ {
			select {
			case <-stopAttack:
				return
			case <-tick.C:
			}
			// As many as the rate asks for by now (a tick late sends more), 64 at most per batch.
			due := min(int(time.Since(attackStart).Seconds()*float64(hostileRate)), maxHostile) - total
			if due <= 0 {
				continue
			}
			ms = ms[:0]
			for range min(due, 512) {
				ms = append(ms, ipv4.Message{})
			}
			idMu.Lock()
			env.ids = [2][]uint32{append([]uint32(nil), liveIDs[0]...), append([]uint32(nil), liveIDs[1]...)}
			idMu.Unlock()
			env.batch = batch
			for j := range ms {
				side := arng.IntN(2) // the gateway attacked
				kind := arng.IntN(hPathReport + 1)
				if (kind == hCloseSpoofed || kind == hRepairSpoofed) && len(env.ids[1-side]) == 0 {
					kind = hEmpty
				}
				to, b := hostileKinds[kind].gen(&env, arng, side)
				ms[j] = ipv4.Message{Buffers: [][]byte{b}, Addr: net.UDPAddrFromAddrPort(to)}
				sent[kind].Add(1)
				if to == gws[side].CREMAddr() {
					toCREM[side].Add(1)
					sentCREM[kind][side].Add(1)
				}
			}
			for off := 0; off < len(ms); {
				pc := attackers[(batch+off/64)%len(attackers)]
				n, err := pc.WriteBatch(ms[off:min(off+64, len(ms))], 0)
				if err != nil || n <= 0 {
					t.Errorf("attacker: %v", err)
					return
				}
				off += n
			}
			total += len(ms)
		}
	}()

	// Sampled through the attack: what the CRFs restored, the heap, the buffers and tables.
	type sample struct {
		at       time.Duration
		restored uint64
	}
	var samples []sample
	var maxHeap uint64
	var maxLive [2]gateway.Levels
	big.Store(true)
	for i, r := range runs {
		r.ca.Do(func(q *rc.QP) {
			// Half the QPs WRITE first, half READ first: both directions carry traffic through
			// both halves of the attack.
			wrs := []rc.SendWR{{ID: 3, Op: rc.OpWrite, Local: r.wbuf, RKey: r.mr.RKey, RemoteAddr: r.mr.Addr},
				{ID: 4, Op: rc.OpRead, Local: r.rbuf, RKey: r.mr.RKey, RemoteAddr: r.mr.Addr + uint64(size)}}
			if i%2 == 1 {
				wrs[0], wrs[1] = wrs[1], wrs[0]
			}
			for _, wr := range wrs {
				if err := q.PostSend(wr); err != nil {
					t.Error(err)
				}
			}
		})
	}
	finished, timeout := 0, time.After(90*time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for finished < 2*nQP {
		select {
		case <-done:
			finished++
		case <-tick.C:
			maxHeap = max(maxHeap, liveHeap(false))
			var restored uint64
			for i, g := range gws {
				st := g.Stats()
				restored += st.Receiver.Flows.Restored
				l := st.Live
				m := &maxLive[i]
				m.CRFFlows, m.Senders, m.ReceiverRoutes = max(m.CRFFlows, l.CRFFlows), max(m.Senders, l.Senders), max(m.ReceiverRoutes, l.ReceiverRoutes)
				m.Nonces, m.BuffersLarge, m.BuffersSmall = max(m.Nonces, l.Nonces), max(m.BuffersLarge, l.BuffersLarge), max(m.BuffersSmall, l.BuffersSmall)
				m.CRFPending = max(m.CRFPending, l.CRFPending)
			}
			samples = append(samples, sample{time.Since(attackStart), restored})
		case <-timeout:
			t.Error("the transfers did not finish in 90 s")
			break wait
		}
	}
	transfer := time.Since(attackStart)
	close(stopAttack)
	<-attackDone
	attack := time.Since(attackStart)
	var total uint64
	for k := range sent {
		total += sent[k].Load()
	}
	t.Logf("transfer %.1f s under attack; %d hostile datagrams in %.1f s (%.0f a second)", transfer.Seconds(), total, attack.Seconds(), float64(total)/attack.Seconds())
	for k := range sent {
		t.Logf("  %-22s %d", hostileKinds[k].name, sent[k].Load())
	}

	// Let the last datagrams in flight be read, then compare. The first spoofed HELLOs' pending
	// sessions expire 3 s after they came (the CRF's handshake time): a transfer done sooner (an
	// idle host) waits for that, so that "hello spoofed" can see them go.
	time.Sleep(max(200*time.Millisecond, 3500*time.Millisecond-time.Since(attackStart)))
	o := &hostileOutcome{base: base}
	for i, g := range gws {
		o.st[i] = g.Stats()
	}
	for k := range sent {
		o.sent[k] = sent[k].Load()
		o.sentCREM[k] = [2]uint64{sentCREM[k][0].Load(), sentCREM[k][1].Load()}
	}
	t.Run("transfer verified", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		for i, r := range runs {
			if r.err != nil {
				t.Errorf("QP %d: %v", i, r.err)
			} else if !r.wrote || !r.read {
				t.Errorf("QP %d: wrote %v, read %v", i, r.wrote, r.read)
			}
		}
	})
	t.Run("sessions kept", func(t *testing.T) { checkSessionsKept(t, gws, runs2keys(addrA, addrB, env), warm, size, mtu) })
	t.Run("restored in both halves", func(t *testing.T) {
		if len(samples) < 4 {
			t.Skipf("%d samples", len(samples))
		}
		mid := samples[len(samples)/2]
		first, last := samples[0], samples[len(samples)-1]
		t.Logf("restored by the CRFs: %d at %v, %d at %v, %d at %v", first.restored, first.at.Round(time.Millisecond),
			mid.restored, mid.at.Round(time.Millisecond), last.restored, last.at.Round(time.Millisecond))
		if mid.restored <= first.restored || last.restored <= mid.restored {
			t.Errorf("the CRFs did not restore packets in both halves of the attack: %d, %d, %d", first.restored, mid.restored, last.restored)
		}
	})
	t.Run("no close taken", func(t *testing.T) {
		for i := range o.st {
			if n := o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.CloseReceived + s.Sender.CloseReceived }); n != 0 {
				t.Errorf("gateway %c: %d CLOSE taken", 'A'+i, n)
			}
		}
	})
	for k, kind := range hostileKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Logf("%d sent, %d to A's CREM socket, %d to B's", o.sent[k], o.sentCREM[k][0], o.sentCREM[k][1])
			if o.sent[k] == 0 {
				t.Fatal("none sent")
			}
			for i := range o.st {
				if o.sentCREM[k][i] > 0 {
					kind.check(t, i, o)
				}
			}
		})
	}
	t.Run("datagrams accounted", func(t *testing.T) {
		for i := range o.st {
			checkAccounted(t, i, o, toCREM[i].Load())
		}
	})
	t.Run("tables bounded", func(t *testing.T) {
		for i, m := range maxLive {
			t.Logf("gateway %c at most: %d CRF flows, %d CRF sessions pending, %d Flow IDs routed, %d CSFs, %d nonces, %d large and %d small buffers", 'A'+i,
				m.CRFFlows, m.CRFPending, m.ReceiverRoutes, m.Senders, m.Nonces, m.BuffersLarge, m.BuffersSmall)
			if m.BuffersLarge > 4096 || m.ReceiverRoutes > 2*4096 || m.Senders > 2*4096 || m.CRFFlows > 2*1024 {
				t.Errorf("gateway %c: beyond the bounds: %+v", 'A'+i, m)
			}
		}
	})
	t.Run("buffers return", func(t *testing.T) {
		for i := range gws {
			var now int
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if now = bufBytes(i); now <= bufBefore[i]*3/2 || time.Now().After(deadline) {
					break
				}
			}
			t.Logf("gateway %c: packet buffers %d KiB before the attack, %d KiB after", 'A'+i, bufBefore[i]>>10, now>>10)
			if now > bufBefore[i]*3/2 {
				t.Errorf("gateway %c: packet buffers %d octets after the attack, %d before: more than 1.5x", 'A'+i, now, bufBefore[i])
			}
		}
	})
	// The heap holds the live flows' windows too (the CRF's sources, the CSF's blocks), which
	// grow with the transfer, not the attack: it is bounded by what the attack may take (the
	// large buffers, the queues' small ones, the CRF's flows from spoofed HELLOs) and the
	// windows; the buffers themselves returned within 1.5x above.
	t.Run("heap bounded", func(t *testing.T) {
		after := liveHeap(true)
		t.Logf("live heap: %.1f MiB before the attack, at most %.1f MiB during it, %.1f MiB after", float64(before)/(1<<20), float64(maxHeap)/(1<<20), float64(after)/(1<<20))
		if limit := before + 2*(4096*9216+2*8192*512+2*1024*16<<10) + 64<<20; maxHeap > limit {
			t.Errorf("live heap reached %d during the attack, beyond %d", maxHeap, limit)
		}
	})
}

// hostileQP names one QP's two flows: A to B (the WRITE's sources, B's CRF) and B to A.
type hostileQP struct{ ab, ba flow.Key }

func runs2keys(addrA, addrB netip.Addr, env hostileEnv) []hostileQP {
	var l []hostileQP
	for j := range env.qpA {
		l = append(l, hostileQP{ab: flow.Key{Src: addrA, Dst: addrB, DestQP: env.qpB[j]}, ba: flow.Key{Src: addrB, Dst: addrA, DestQP: env.qpA[j]}})
	}
	return l
}

// checkSessionsKept checks that the attack started no session anew and took no flow over: the
// CRF flows that carried the first WRITE and READ carried the second too, and restored some.
func checkSessionsKept(t *testing.T, gws [2]*gateway.Gateway, qps []hostileQP, warm, size, mtu int) {
	var readRestored uint64
	for i, q := range qps {
		inB, _ := gws[1].ReceiverFlow(q.ab)
		inA, _ := gws[0].ReceiverFlow(q.ba)
		outA, _ := gws[0].SenderFlow(q.ab)
		outB, _ := gws[1].SenderFlow(q.ba)
		t.Logf("QP %d: B's CRF restored %d of %d sources of the WRITE, A's %d of %d of the READ; CSF sessions %v and %v, HELLO_ACKs accepted %d and %d (peer silent %d %d, new PSN spaces %d %d)",
			i, inB.Restored, inB.Sources, inA.Restored, inA.Sources, outA.State, outB.State, outA.Stats.HelloAckAccepted, outB.Stats.HelloAckAccepted,
			outA.Stats.PeerSilent, outB.Stats.PeerSilent, outA.Stats.PSNSpaceRestarts, outB.Stats.PSNSpaceRestarts)
		// A CSF starts a session anew when the CRF has said nothing for 3 s while sources flow
		// (E31: PeerSilent), as on a machine so loaded that the gateways stall; nothing else may
		// start one: the attack must not.
		restartsA := outA.Stats.PeerSilent + outA.Stats.PSNSpaceRestarts
		restartsB := outB.Stats.PeerSilent + outB.Stats.PSNSpaceRestarts
		if outA.Stats.HelloAckAccepted != 1+restartsA || outB.Stats.HelloAckAccepted != 1+restartsB {
			t.Errorf("QP %d: %d and %d sessions for %d and %d restarts: the attack started new ones", i, outA.Stats.HelloAckAccepted, outB.Stats.HelloAckAccepted, restartsA, restartsB)
		}
		// The flows that carried the first WRITE and READ carried the second too: the same
		// flows, never taken over (a flow opened at the attack would have seen at most 60
		// percent of the sources; the path loses 2 percent, which arrive again or restored).
		if want := uint64((warm+size)/mtu) * 9 / 10; restartsA == 0 && inB.Sources < want || restartsB == 0 && inA.Sources < want {
			t.Errorf("QP %d: the CRFs' flows saw %d and %d sources, want %d each: a flow taken over, or left unprotected", i, inB.Sources, inA.Sources, want)
		}
		if restartsA+restartsB > 0 {
			t.Logf("QP %d: sessions started anew after the CRF fell silent (the machine stalled the gateways): %d and %d", i, restartsA, restartsB)
		}
		if inB.Restored == 0 {
			t.Errorf("QP %d: B's CRF restored nothing of the WRITE", i)
		}
		readRestored += inA.Restored
	}
	if readRestored == 0 {
		t.Error("A's CRF restored nothing of the READs") // the requester asks again early (E48): fewer restored than for the WRITEs
	}
}

// checkAccounted checks gateway i's accounting of datagrams: per socket, received = handed on +
// dropped; what was sent to its CREM socket was received or dropped by the kernel (counted);
// and the hostile datagrams that carry nothing valid are counted where they are refused.
func checkAccounted(t *testing.T, i int, o *hostileOutcome, toCREM uint64) {
	name := string(rune('A' + i))
	s := &o.st[i]
	g := s.Gateway
	for _, k := range []string{"crem", "local", "wan"} {
		if g["rx_packets_"+k] != g["handed_"+k]+g["dropped_"+k] {
			t.Errorf("gateway %s, %s socket: %d received, %d handed on + %d dropped", name, k, g["rx_packets_"+k], g["handed_"+k], g["dropped_"+k])
		}
	}
	if got := g["rx_packets_crem"] + g["socket_drops_crem"]; got < toCREM {
		t.Errorf("gateway %s: %d datagrams received on the CREM socket and %d dropped by the kernel: fewer than the %d hostile ones sent", name, g["rx_packets_crem"], g["socket_drops_crem"], toCREM)
	}
	// Refusals at the router (header, parse, unknown Flow ID) and at the CRF (wrong source,
	// malformed, ignored, refused HELLO) cover the datagrams that carry nothing valid.
	refused := g["crem_discarded"] + g["crem_malformed"] + g["crem_unknown_flow"] +
		s.Receiver.MessagesWrongSource + s.Receiver.MessagesMalformed + s.Receiver.MessagesIgnored + s.Receiver.HelloRefused +
		s.Sender.PathReportsRejected + s.Sender.MessagesIgnored + s.Sender.MessagesMalformed
	lost := g["socket_drops_crem"] + g["shard_queue_full"] + g["buffers_exhausted"]
	t.Logf("gateway %s: CREM socket %d received (%d kernel drops, %d queue full, %d no buffer); router: %d discarded, %d malformed, %d unknown flow; CRF: %d wrong source, %d malformed, %d ignored, %d HELLOs (%d refused, %d takeovers refused, %d flows opened), %d ICRC mismatches, %d repairs rejected; CSF: %d PATH_REPORTs rejected (%d unlisted, %d malformed)",
		name, g["rx_packets_crem"], g["socket_drops_crem"], g["shard_queue_full"], g["buffers_exhausted"], g["crem_discarded"], g["crem_malformed"], g["crem_unknown_flow"],
		s.Receiver.MessagesWrongSource, s.Receiver.MessagesMalformed, s.Receiver.MessagesIgnored, s.Receiver.HelloReceived, s.Receiver.HelloRefused, s.Receiver.TakeoverRefused, s.Receiver.FlowsOpened,
		s.Receiver.Flows.ICRCMismatch, s.Receiver.Flows.RepairRejected, s.Sender.PathReportsRejected, s.Sender.PathReportsUnlisted, s.Sender.PathReportsMalformed)
	// Hostile datagrams that carry nothing valid, about half of each kind sent to this gateway.
	bad := (o.sent[hGarbage] + o.sent[hMalformed] + o.sent[hCloseSpoofed] + o.sent[hRepairSpoofed] + o.sent[hPathReport]) / 2
	if refused+lost < bad*9/10 {
		t.Errorf("gateway %s: %d refusals counted (and %d datagrams lost, counted) for about %d hostile datagrams that carry nothing valid", name, refused, lost, bad)
	}
	if s.Receiver.MessagesWrongSource == 0 || s.Sender.PathReportsRejected == 0 {
		t.Errorf("gateway %s: spoofed CLOSE and REPAIR refused %d times, unlisted PATH_REPORTs %d: want both counted", name, s.Receiver.MessagesWrongSource, s.Sender.PathReportsRejected)
	}
}
