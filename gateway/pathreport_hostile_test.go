package gateway_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
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

// The kinds of forged PATH_REPORT TestForgedPathReportsSecurity sends.
const (
	fUnlisted  = iota // from an address not among the reporters, for a live flow
	fWrongFlow        // from the configured reporter, for a flow the gateway does not have
	fAbsurd           // from the configured reporter, for a live flow, Lost Counts no flow could have
	fNoSuchPSN        // from the configured reporter, for a live flow, PSNs the flow never sent
	fKinds
)

var forgedNames = [fKinds]string{"unlisted reporter", "wrong flow", "absurd counts", "PSNs that do not exist"}

// TestForgedPathReportsSecurity (draft, Security Considerations: forged PATH_REPORTs; C14,
// C10, C16): the relay pair of TestHostileTraffic on loopback (2 RC queue pairs, 2
// percent loss each way on a 2 ms path, adaptation off, 127.0.0.9 the configured reporter)
// carries a verified transfer (a 4 MiB RDMA WRITE and READ per QP after a first 1 MiB of
// each) while both gateways take forged PATH_REPORTs at 10,000 a second for at most 20 s: from
// an unlisted address naming the live flows and their PSNs' neighbourhood, from the configured
// reporter for flows the gateway does not have, for the live flows with absurd Lost Counts
// (0xFFFFFFFF; two entries whose 32-bit sum wraps), and for the live flows naming PSNs they
// never sent. The transfer verifies; m does not move (no PARAM_UPDATE after the first, no
// breaker trip); no extra repair is sent (ExtraSent stays 0: no report of the run is genuine);
// each kind is counted where it is refused, and all of them together account for what was
// sent (less what the kernel dropped, counted); the tables hold what they held, and the live heap
// stays within a bound.
func TestForgedPathReportsSecurity(t *testing.T) {
	if testing.Short() {
		t.Skip("a transfer through two gateways under a flood of PATH_REPORTs")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CREM_HOSTILE_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (CREM_HOSTILE_SEED replays it)", seed)
	nQP, size, rate := 2, 4<<20, 10000
	if testenv.Race {
		rate = 2000
	}
	const (
		mtu       = 4096
		rtt       = 2 * time.Millisecond
		warm      = 1 << 20
		maxAttack = 20 * time.Second
	)
	reporterAddr := netip.MustParseAddr("127.0.0.9")
	off := false
	p := newRelayPair(t, relaySetup{seed: seed, loss: "0.02", rate: 1e9, rtt: rtt, mtu: mtu, shards: 2, maxOpenBlocks: 16,
		reporters: []netip.Addr{reporterAddr}, adapt: &off})
	addrA, addrB, hostA, hostB, gws := p.addrA, p.addrB, p.hostA, p.hostB, p.gws
	p.path.run()
	rng := rand.New(rand.NewPCG(seed, 0x12))

	type qpRun struct {
		qa, qb          *rc.QP
		ca              *udp.Conn
		qpA, qpB        uint32
		psnA, psnB      psn.PSN // the first PSNs each side sends
		wbuf, rbuf, mem []byte
		mr              *rc.MR
		wrote, read     bool
		err             error
	}
	var mu sync.Mutex
	var big atomic.Bool
	done := make(chan struct{}, 2*nQP)
	warmed := make(chan struct{}, 2*nQP)
	runs := make([]*qpRun, nQP)
	const qpRate = 30e6
	w := 32*(mtu+64)*8*time.Second/time.Duration(qpRate) + 2*time.Millisecond
	for i := range runs {
		r := &qpRun{qpA: 0x100 + uint32(i), qpB: 0x200 + uint32(i), psnA: psn.PSN(rng.Uint32N(psn.Modulus)), psnB: psn.PSN(rng.Uint32N(psn.Modulus))}
		runs[i] = r
		ca := rc.Config{QPN: r.qpA, RemoteQPN: r.qpB, SendPSN: r.psnA, RecvPSN: r.psnB,
			MTU: mtu, Mode: rc.ModeTCAETH, Rate: qpRate, RTT: rtt + time.Millisecond, Burst: time.Millisecond,
			ReorderWindow: w, RetryCount: 50, SendBuffer: 1 << 17, LocalAddr: addrA, RemoteAddr: addrB,
			LocalPort: hostA.LocalAddr().Port(), RemotePort: hostB.LocalAddr().Port()}
		cb := ca
		cb.QPN, cb.RemoteQPN, cb.SendPSN, cb.RecvPSN = r.qpB, r.qpA, ca.RecvPSN, ca.SendPSN
		cb.LocalAddr, cb.RemoteAddr, cb.LocalPort, cb.RemotePort = addrB, addrA, ca.RemotePort, ca.LocalPort
		cb.NotifyWrites = true
		var err error
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
		if _, err = hostB.Add(r.qb, gws[1].RelayAddr(), nil, func(c rc.Completion) {
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
	for _, r := range runs {
		r.ca.Do(func(q *rc.QP) {
			q.PostSend(rc.SendWR{ID: 1, Op: rc.OpWrite, Local: r.wbuf[:warm], RKey: r.mr.RKey, RemoteAddr: r.mr.Addr})
			q.PostSend(rc.SendWR{ID: 2, Op: rc.OpRead, Local: r.rbuf[:warm], RKey: r.mr.RKey, RemoteAddr: r.mr.Addr + uint64(size)})
		})
	}
	for range 2 * nQP {
		select {
		case <-warmed:
		case <-time.After(60 * time.Second):
			t.Fatal("the first WRITE and READ did not complete in 60 s")
		}
	}
	keys := func(r *qpRun) [2]flow.Key { // each gateway's outbound flow of the QP
		return [2]flow.Key{{Src: addrA, Dst: addrB, DestQP: r.qpB}, {Src: addrB, Dst: addrA, DestQP: r.qpA}}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok := true
		for _, r := range runs {
			for side, k := range keys(r) {
				f, found := gws[side].SenderFlow(k)
				ok = ok && found && f.State == csf.StateEstablished && f.Stats.ConfigsApplied > 0
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flows were not established in 20 s")
		}
	}
	base := [2]gateway.Stats{gws[0].Stats(), gws[1].Stats()}
	before := liveHeap(true)

	listed := bindLoopback(t, reporterAddr)
	defer listed.Close()
	var strangers []*net.UDPConn
	for i := range 8 {
		c := bindLoopback(t, netip.AddrFrom4([4]byte{127, 0, 2, byte(i + 1)}))
		defer c.Close()
		strangers = append(strangers, c)
	}
	conns := append([]*net.UDPConn{listed}, strangers...)
	pcs := make([]*ipv4.PacketConn, len(conns))
	for i, c := range conns {
		c.SetWriteBuffer(4 << 20)
		pcs[i] = ipv4.NewPacketConn(c)
	}
	var sent [fKinds][2]atomic.Uint64
	stop, attackDone := make(chan struct{}), make(chan struct{})
	attackStart := time.Now()
	go func() {
		defer close(attackDone)
		arng := rand.New(rand.NewPCG(seed, 3))
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var bufs [][]byte
		total := 0
		for batch := 0; time.Since(attackStart) < maxAttack; batch++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			due := int(time.Since(attackStart).Seconds()*float64(rate)) - total
			if due <= 0 {
				continue
			}
			due = min(due, 512)
			var byConn [9][]ipv4.Message
			bufs = bufs[:0]
			for range due {
				side := arng.IntN(2)
				kind := arng.IntN(fKinds)
				r := runs[arng.IntN(nQP)]
				k := keys(r)[side]
				// The PSNs the flow's source sends from: A's WRITE and READ requests, and B's
				// READ responses, which carry the PSNs of the requests they answer (IBTA), so
				// both directions' data PSNs lie in the range that starts at psnA.
				first := r.psnA
				pr := wire.PathReport{Method: wire.MethodNodeDrops, Source: k.Src, Destination: k.Dst, FlowLabel: k.DestQP}
				h := wire.HopEntry{NodeID: 77, MarkingPeriodNumber: uint32(batch), LostCount: 1, Cause: wire.CauseCongestion,
					DroppedPSNs: []psn.PSN{first.Add(arng.IntN(2 * size / mtu))}}
				conn := 0
				switch kind {
				case fUnlisted: // PSNs the flow sends, or near them
					conn = 1 + arng.IntN(len(strangers))
				case fWrongFlow:
					pr.FlowLabel = 0x300 + arng.Uint32N(1000) // no QP of the run
					if arng.IntN(2) == 0 {
						pr.Source, pr.Destination = netip.AddrFrom4([4]byte{10, 9, byte(arng.IntN(256)), 1}), k.Src
					}
				case fAbsurd:
					h.LostCount = 0xffffffff
					if arng.IntN(2) == 0 {
						h.LostCount = 0xfffffff0
						pr.Hops = append(pr.Hops, wire.HopEntry{NodeID: 78, LostCount: 0x20, Cause: wire.CauseCongestion})
					}
				case fNoSuchPSN: // half the PSN space away, or before the flow's first
					h.Cause, h.LostCount = wire.CauseCorruption, 3
					h.DroppedPSNs = []psn.PSN{first.Add(1<<23 + arng.IntN(1<<20)), first.Add(-1 - arng.IntN(4096)), first.Add(1<<22 + arng.IntN(1<<20))}
				}
				pr.Hops = append([]wire.HopEntry{h}, pr.Hops...)
				b, err := pr.Append(nil)
				if err != nil {
					t.Errorf("forging: %v", err)
					return
				}
				bufs = append(bufs, b)
				byConn[conn] = append(byConn[conn], ipv4.Message{Buffers: [][]byte{b}, Addr: net.UDPAddrFromAddrPort(gws[side].CREMAddr())})
				sent[kind][side].Add(1)
			}
			for c, ms := range byConn {
				for off := 0; off < len(ms); {
					n, err := pcs[c].WriteBatch(ms[off:min(off+64, len(ms))], 0)
					if err != nil || n <= 0 {
						t.Errorf("forger: %v", err)
						return
					}
					off += n
				}
			}
			total += due
		}
	}()

	big.Store(true)
	for i, r := range runs {
		r.ca.Do(func(q *rc.QP) {
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
	var maxHeap uint64
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
		case <-timeout:
			t.Error("the transfers did not finish in 90 s")
			break wait
		}
	}
	close(stop)
	<-attackDone
	attack := time.Since(attackStart)
	var total uint64
	for k := range sent {
		total += sent[k][0].Load() + sent[k][1].Load()
	}
	t.Logf("%d forged PATH_REPORTs in %.1f s (%.0f a second)", total, attack.Seconds(), float64(total)/attack.Seconds())
	mu.Lock()
	for i, r := range runs {
		if r.err != nil {
			t.Errorf("QP %d: %v", i, r.err)
		} else if !r.wrote || !r.read {
			t.Errorf("QP %d: wrote %v, read %v", i, r.wrote, r.read)
		}
	}
	mu.Unlock()

	// Every forged report read, then compared.
	var st [2]gateway.Stats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		counted := true
		for i, g := range gws {
			st[i] = g.Stats()
			s, gm := st[i].Sender, st[i].Gateway
			n := s.PathReportsRejected + s.PathReports + gm["path_reports_unknown_flow"] + gm["socket_drops_crem"] + gm["shard_queue_full"] + gm["buffers_exhausted"]
			counted = counted && n >= sent[0][i].Load()+sent[1][i].Load()+sent[2][i].Load()+sent[3][i].Load()
		}
		if counted || time.Now().After(deadline) {
			break
		}
	}
	for i := range gws {
		name := string(rune('A' + i))
		s, b, g := st[i].Sender, base[i].Sender, st[i].Gateway
		got := [fKinds]uint64{s.PathReportsUnlisted - b.PathReportsUnlisted, g["path_reports_unknown_flow"] - base[i].Gateway["path_reports_unknown_flow"],
			s.PathReportsImplausible - b.PathReportsImplausible, s.PathReports - b.PathReports}
		lost := g["socket_drops_crem"] + g["shard_queue_full"] + g["buffers_exhausted"]
		var all, counted uint64
		for k := range got {
			n := sent[k][i].Load()
			all += n
			counted += got[k]
			t.Logf("gateway %s: %-24s %6d sent, %6d counted as %s", name, forgedNames[k], n, got[k],
				[fKinds]string{"unlisted", "unknown flow", "implausible", "taken"}[k])
		}
		// A flow that sent nothing in the last two LOSS_REPORT intervals (a READ response flow
		// while its QP writes) makes any Lost Count implausible: the reports naming PSNs that do
		// not exist are then refused as implausible, else taken and their PSNs found in no block.
		nA, nN := sent[fAbsurd][i].Load(), sent[fNoSuchPSN][i].Load()
		for k, bad := range []bool{
			got[fUnlisted] > sent[fUnlisted][i].Load() || sent[fUnlisted][i].Load() > 0 && got[fUnlisted] == 0,
			got[fWrongFlow] > sent[fWrongFlow][i].Load() || sent[fWrongFlow][i].Load() > 0 && got[fWrongFlow] == 0,
			got[fAbsurd]+got[fNoSuchPSN] > nA+nN || nA > 0 && got[fAbsurd] == 0,
			got[fNoSuchPSN] > nN,
		} {
			if bad {
				t.Errorf("gateway %s: %s miscounted: %v sent, %v counted", name, forgedNames[k], sent[k][i].Load(), got[k])
			}
		}
		unknownPSNs := s.PathReportDropsUnknown - b.PathReportDropsUnknown
		t.Logf("gateway %s: %d counted of %d sent (%d lost, counted: kernel drops, queue full, no buffer); %d dropped PSNs of no held position; extra symbols %d; wrong flow at the CSF %d",
			name, counted, all, lost, unknownPSNs, s.ExtraSent, s.PathReportsWrongFlow)
		if counted+lost < all*9/10 {
			t.Errorf("gateway %s: %d forged reports counted and %d lost, of %d sent", name, counted, lost, all)
		}
		if unknownPSNs < 3*got[fNoSuchPSN] || nA+nN > 0 && got[fAbsurd]+got[fNoSuchPSN] == 0 {
			t.Errorf("gateway %s: %d dropped PSNs counted as of no held position, want %d (named %d, repeated %d, covered %d, extra %d)", name, unknownPSNs, 3*got[fNoSuchPSN],
				s.PathReportDrops-b.PathReportDrops, s.PathReportDropsRepeated-b.PathReportDropsRepeated, s.PathReportDropsCovered-b.PathReportDropsCovered, s.ExtraSent)
		}
		if s.ExtraSent != 0 {
			t.Errorf("gateway %s: %d extra symbols sent for forged reports", name, s.ExtraSent)
		}
		// The breaker reads the peer's LOSS_REPORTs only, never a PATH_REPORT
		// (csf.TestPathReportsNeverTripTheBreaker). Under the race detector the gateways fall so
		// far behind that their sockets drop datagrams, and a second of genuine loss over 10
		// percent opens it: logged there, not judged.
		trips := s.BreakerTrips
		if testenv.Race && trips != 0 {
			t.Logf("gateway %s: %d breaker trips from the path's own loss under the race detector", name, trips)
			trips = 0
		}
		if s.ParamUpdateSent != b.ParamUpdateSent || s.MChanges != 0 || trips != 0 {
			t.Errorf("gateway %s: m moved: %d PARAM_UPDATEs during the attack, %d m changes, %d breaker trips", name,
				s.ParamUpdateSent-b.ParamUpdateSent, s.MChanges, s.BreakerTrips)
		}
	}
	// No report leaves state behind: the tables hold what they held before the attack. The heap
	// grows with the transfer (the engines' windows fill), not with the reports: within a bound
	// far below what 20,000 reports a second would take if any were kept.
	for i := range gws {
		l, l0 := st[i].Live, base[i].Live
		if l.Senders != l0.Senders || l.CSFSessions != l0.CSFSessions || l.Nonces != l0.Nonces || l.CRFFlows != l0.CRFFlows {
			t.Errorf("gateway %c: tables changed under the reports: %+v before, %+v after", 'A'+i, l0, l)
		}
	}
	after := liveHeap(true)
	t.Logf("live heap: %.1f MiB before the reports, at most %.1f MiB during them, %.1f MiB after", float64(before)/(1<<20), float64(maxHeap)/(1<<20), float64(after)/(1<<20))
	if maxHeap > before+64<<20 || after > before+48<<20 {
		t.Errorf("live heap grew with the forged reports: %d before, %d at most, %d after", before, maxHeap, after)
	}
}
