package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
)

// lossyPath is an impaired path between two gateways on loopback: one socket per side (both on
// the gateways' CREM port, so every CREM message crosses it), one netem link per direction
// carrying RoCEv2 and CREM alike in the order sent; what arrives on one side goes out of the
// other side's socket to the destination its sender is routed to.
type lossyPath struct {
	start  time.Time
	sock   [2]*net.UDPConn
	addr   [2]netip.AddrPort
	routes [2]map[netip.AddrPort]netip.AddrPort
	links  [2]*netem.Link
	mu     [2]sync.Mutex
	in     [2]chan pathItem
	stop   chan struct{}
	wg     sync.WaitGroup
	// tap, if set before run, sees every datagram the path reads on side (0: from the
	// gateway behind ends[0]), before it is routed; it must not keep b.
	tap func(side int, b []byte)
}

type pathItem struct {
	to   netip.AddrPort
	data []byte
}

// newLossyPath makes a path of the two bound sockets ends (it closes them).
func newLossyPath(t *testing.T, ends [2]*net.UDPConn, cfg [2]netem.Config) *lossyPath {
	p := &lossyPath{start: time.Now(), stop: make(chan struct{}),
		routes: [2]map[netip.AddrPort]netip.AddrPort{{}, {}}}
	for i, s := range ends {
		l, err := netem.NewLink(cfg[i])
		if err != nil {
			t.Fatal(err)
		}
		p.links[i] = l
		s.SetReadBuffer(8 << 20)
		s.SetWriteBuffer(8 << 20)
		p.sock[i], p.addr[i] = s, s.LocalAddr().(*net.UDPAddr).AddrPort()
		p.in[i] = make(chan pathItem, 1<<16)
	}
	return p
}

// bindCREMPort binds one UDP port, drawn by the system, on every address: the CREM port of
// the gateways and of the path's two ends. Bound once and handed over, never let go between.
func bindCREMPort(t *testing.T, addrs ...netip.Addr) []*net.UDPConn {
	t.Helper()
	for range 100 {
		first, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrs[0], 0)))
		if err != nil {
			t.Fatal(err)
		}
		out := []*net.UDPConn{first}
		port := first.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		for _, a := range addrs[1:] {
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
			if err != nil {
				break // in use there: another port
			}
			out = append(out, c)
		}
		if len(out) == len(addrs) {
			return out
		}
		for _, c := range out {
			c.Close()
		}
	}
	t.Skip("no UDP port free on every address")
	return nil
}

// relaySetup says what a relayPair is made of.
type relaySetup struct {
	seed          uint64
	loss          string // each direction's loss, a netem loss specification
	rate          int64  // bit/s
	rtt           time.Duration
	mtu           int
	shards        int
	maxOpenBlocks int
	bufferTrim    time.Duration // 0: the gateway's default
	reporters     []netip.Addr  // the gateways' configured path reporters
	adapt         *bool         // nil: the default (the RECOMMENDED policy on)
	rule          policy.Rule   // "": the gateway's default
}

// relayPair is two gateways in relay mode on loopback: A (127.0.0.1) in front of hostA, B
// (127.0.0.2) in front of hostB, their CREM and WAN sockets joined by a lossyPath (on 127.0.0.3
// and 127.0.0.4). Every socket is bound once and handed over; everything stops when the test
// ends. The caller sets the path's tap, if any, and runs the path.
type relayPair struct {
	addrA, addrB netip.Addr
	hostA, hostB *udp.Host
	path         *lossyPath
	gws          [2]*gateway.Gateway
}

func newRelayPair(t *testing.T, s relaySetup) *relayPair {
	t.Helper()
	p := &relayPair{addrA: netip.MustParseAddr("127.0.0.1"), addrB: netip.MustParseAddr("127.0.0.2")}
	var cfgs [2]netem.Config
	for i := range cfgs {
		loss, err := netem.ParseLossSpec(s.loss)
		if err != nil {
			t.Fatal(err)
		}
		seed := s.seed*2 + uint64(i) + 1
		cfgs[i] = netem.Config{Rate: s.rate, Delay: s.rtt / 2, QueuePackets: 100000, Loss: loss.New(seed), Seed: seed}
	}
	socks := bindCREMPort(t, p.addrA, p.addrB, netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4"))
	p.path = newLossyPath(t, [2]*net.UDPConn{socks[2], socks[3]}, cfgs)
	t.Cleanup(p.path.close)
	var err error
	if p.hostA, err = udp.Listen(netip.AddrPortFrom(p.addrA, 0).String(), udp.Options{SocketBuffer: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.hostA.Close() })
	if p.hostB, err = udp.Listen(netip.AddrPortFrom(p.addrB, 0).String(), udp.Options{SocketBuffer: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.hostB.Close() })

	f := false
	rules := []gateway.ProtectRule{
		{Src: gateway.HostPrefix(p.addrA), Dst: gateway.HostPrefix(p.addrB), SrcPort: p.hostA.LocalAddr().Port(), Ordered: &f},
		{Src: gateway.HostPrefix(p.addrB), Dst: gateway.HostPrefix(p.addrA), SrcPort: p.hostB.LocalAddr().Port(), Ordered: &f},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, self := range []netip.Addr{p.addrA, p.addrB} {
		host, other := p.hostA, p.addrB
		if i == 1 {
			host, other = p.hostB, p.addrA
		}
		c := gateway.Config{Peer: p.path.addr[i], Shards: s.shards, Protect: rules, Reporters: s.reporters,
			Relay: gateway.RelayConfig{Target: host.LocalAddr(), PeerData: p.path.addr[i],
				LocalEndpoint: self, RemoteEndpoint: other},
			Policy: gateway.PolicyConfig{K: new(32), M: new(4), MTU: new(s.mtu), InitialRTT: gateway.Dur((s.rtt + time.Millisecond)),
				MaxOpenBlocks: new(s.maxOpenBlocks), BurstGap: gateway.Dur(2 * time.Millisecond), Idle: gateway.Dur(5 * time.Minute), Adapt: s.adapt, Rule: s.rule}}
		g, err := gateway.New(c, gateway.Options{Seed: s.seed*16 + uint64(i) + 1, BufferTrim: s.bufferTrim,
			Sockets: gateway.Sockets{CREM: socks[i], Relay: bindLoopback(t, self), WAN: bindLoopback(t, self)}})
		if err != nil {
			t.Fatal(err)
		}
		p.gws[i] = g
		wg.Add(1)
		go func() { defer wg.Done(); g.Run(ctx) }()
	}
	for i := range 2 {
		p.path.routes[i][p.gws[i].CREMAddr()] = p.gws[1-i].CREMAddr()
		p.path.routes[i][p.gws[i].WANAddr()] = p.gws[1-i].WANAddr()
	}
	return p
}

// bindLoopback binds a UDP socket on a (port 0: the system's choice).
func bindLoopback(t *testing.T, a netip.Addr) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (p *lossyPath) now() time.Duration { return time.Since(p.start) }

// run starts the readers and the links; routes are fixed from here on.
func (p *lossyPath) run() {
	for side := range 2 {
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			buf := make([]byte, 65536)
			for {
				n, from, err := p.sock[side].ReadFromUDPAddrPort(buf)
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue
				}
				if p.tap != nil {
					p.tap(side, buf[:n])
				}
				to, ok := p.routes[side][netip.AddrPortFrom(from.Addr().Unmap(), from.Port())]
				if !ok {
					continue
				}
				select {
				case p.in[side] <- pathItem{to, append([]byte(nil), buf[:n]...)}:
				case <-p.stop:
					return
				}
			}
		}()
		go func() { defer p.wg.Done(); p.loop(side) }()
	}
}

func (p *lossyPath) loop(side int) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	l := p.links[side]
	var dests []netip.AddrPort // by packet ID
	out := func(pk netem.Packet) { p.sock[1-side].WriteToUDPAddrPort(pk.Data, dests[pk.ID]) }
	ids := map[netip.AddrPort]uint64{}
	for {
		select {
		case it := <-p.in[side]:
			id, ok := ids[it.to]
			if !ok {
				id = uint64(len(dests))
				ids[it.to] = id
				dests = append(dests, it.to)
			}
			p.mu[side].Lock()
			l.Send(p.now(), netem.Packet{Data: it.data, ID: id})
			l.Deliver(p.now(), out)
			p.mu[side].Unlock()
		case <-t.C:
			p.mu[side].Lock()
			l.Deliver(p.now(), out)
			p.mu[side].Unlock()
		case <-p.stop:
			return
		}
		p.mu[side].Lock()
		next, ok := l.NextDeadline()
		p.mu[side].Unlock()
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		if ok {
			t.Reset(max(next-p.now(), 0))
		} else {
			t.Reset(time.Hour)
		}
	}
}

func (p *lossyPath) stats(side int) netem.Stats {
	p.mu[side].Lock()
	defer p.mu[side].Unlock()
	return p.links[side].Stats()
}

// inject sends b out of side's socket to to, as if the path carried it: an on-path attacker.
func (p *lossyPath) inject(side int, to netip.AddrPort, b []byte) {
	p.sock[side].WriteToUDPAddrPort(b, to)
}

func (p *lossyPath) close() {
	close(p.stop)
	for _, s := range p.sock {
		s.Close()
	}
	p.wg.Wait()
}

// fill writes the pattern of message (qp, op) into b; check says whether b holds it.
func fill(b []byte, seed uint64, qp, op int) {
	r := rand.NewPCG(seed, uint64(qp)<<8|uint64(op))
	for k := 0; k < len(b); k += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && k+j < len(b); j++ {
			b[k+j] = byte(v >> (8 * j))
		}
	}
}

func check(b []byte, seed uint64, qp, op int) bool {
	r := rand.NewPCG(seed, uint64(qp)<<8|uint64(op))
	for k := 0; k < len(b); k += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && k+j < len(b); j++ {
			if b[k+j] != byte(v>>(8*j)) {
				return false
			}
		}
	}
	return true
}

// TestRelayManyQPs (C9, C13): 8 RC queue pairs between one pair of endpoints, each with
// its own random initial PSNs, through two gateways in relay mode with no reverse_qp configured
// and 1 percent loss each way on a 2 ms path. Every QP does an RDMA WRITE of 16 MiB and an RDMA
// READ (one of 256 MiB, the others of 16 MiB), MTU 4096. Every byte is verified, the CRFs
// restore packets of every QP and, over the QPs, in both directions; no CLOSE is sent before
// the end, and every
// outbound flow is paired with its own requester QP by PSN correlation. Its CSF was offered no
// more packets passing back than its own responder sent, and released nothing beyond the PSNs
// its own QP sent: an ACK of another QP released nothing. (Before the gateway knew which QP's
// ACKs were a flow's, every CSF was offered every QP's ACKs, released blocks on them, and their
// repair was then asked for in vain: 700 to 8,500 REPAIR_REQUESTs per flow found no block, and
// the run took three times as long.)
func TestRelayManyQPs(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 624 MiB through two gateways")
	}
	if testenv.Race {
		t.Skip("moves 624 MiB through two gateways: too slow under the race detector")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CREM_MANYQP_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (CREM_MANYQP_SEED replays it; CREM_MANYQP_RULE=draft or cost sets policy.rule)", seed)
	const (
		nQP     = 8
		mtu     = 4096
		size    = 16 << 20
		bigRead = 256 << 20
		rtt     = 2 * time.Millisecond
		rate    = 3e9 // the path; the QPs share it
	)
	rng := rand.New(rand.NewPCG(seed, 0xc9))
	p := newRelayPair(t, relaySetup{seed: seed, loss: "0.01", rate: rate, rtt: rtt, mtu: mtu, shards: 1, maxOpenBlocks: 256, rule: policy.Rule(os.Getenv("CREM_MANYQP_RULE"))})
	addrA, addrB, hostA, hostB, path, gws := p.addrA, p.addrB, p.hostA, p.hostB, p.path, p.gws
	var err error
	path.run()

	type qpRun struct {
		qa, qb      *rc.QP
		ca, cb      *udp.Conn
		qpA, qpB    uint32
		wbuf, rbuf  []byte
		mem         []byte
		mr          *rc.MR
		readSize    int
		sendPSN     psn.PSN
		wrote, read bool
		err         error
	}
	var mu sync.Mutex
	done := make(chan struct{})
	runs := make([]*qpRun, nQP)
	finished := 0
	finish := func() {
		if finished++; finished == nQP {
			close(done)
		}
	}
	used := map[uint32]bool{0: true, 1: true}
	qpn := func() uint32 {
		for {
			if q := rng.Uint32N(1 << 24); !used[q] {
				used[q] = true
				return q
			}
		}
	}
	w := 32*(mtu+64)*8*time.Second/time.Duration(rate/nQP) + 2*time.Millisecond // T5: a block's span plus 2 ms
	for i := range runs {
		r := &qpRun{qpA: qpn(), qpB: qpn(), readSize: size}
		if i == 0 {
			r.readSize = bigRead
		}
		runs[i] = r
		ca := rc.Config{QPN: r.qpA, RemoteQPN: r.qpB, SendPSN: psn.PSN(rng.Uint32N(psn.Modulus)), RecvPSN: psn.PSN(rng.Uint32N(psn.Modulus)),
			MTU: mtu, Mode: rc.ModeTCAETH, Rate: rate * 6 / 10 / nQP, RTT: rtt + time.Millisecond, Burst: time.Millisecond,
			ReorderWindow: w, RetryCount: 50, SendBuffer: 1 << 17, LocalAddr: addrA, RemoteAddr: addrB,
			LocalPort: hostA.LocalAddr().Port(), RemotePort: hostB.LocalAddr().Port()}
		r.sendPSN = ca.SendPSN
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
		r.wbuf, r.rbuf, r.mem = make([]byte, size), make([]byte, r.readSize), make([]byte, size+r.readSize)
		fill(r.wbuf, seed, i, 0)
		fill(r.mem[size:], seed, i, 1)
		if r.mr, err = r.qb.RegisterMR(r.mem, rc.AccessRemoteWrite|rc.AccessRemoteRead|rc.AccessLocalWrite); err != nil {
			t.Fatal(err)
		}
		i := i
		if r.cb, err = hostB.Add(r.qb, gws[1].RelayAddr(), nil, func(c rc.Completion) {
			if c.Kind != rc.KindWritePlaced {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if c.Len != size || !check(r.mem[:size], seed, i, 0) {
				r.err = fmt.Errorf("QP %d: the WRITE placed %d octets, not the ones sent", i, c.Len)
			}
			r.wrote = true
			if r.read {
				finish()
			}
		}); err != nil {
			t.Fatal(err)
		}
		if r.ca, err = hostA.Add(r.qa, gws[0].RelayAddr(), nil, func(c rc.Completion) {
			if c.Kind != rc.KindSend || c.ID != 2 {
				if c.Status != rc.StatusSuccess {
					mu.Lock()
					r.err = fmt.Errorf("QP %d: %v (%v)", i, c.Status, r.qa.Err())
					mu.Unlock()
				}
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if c.Status != rc.StatusSuccess {
				r.err = fmt.Errorf("QP %d: READ %v (%v)", i, c.Status, r.qa.Err())
			} else if !check(r.rbuf, seed, i, 1) {
				r.err = fmt.Errorf("QP %d: the READ brought other octets than the responder's", i)
			}
			r.read = true
			if r.wrote {
				finish()
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for _, r := range runs {
		r.ca.Do(func(q *rc.QP) {
			if err := q.PostSend(rc.SendWR{ID: 1, Op: rc.OpWrite, Local: r.wbuf, RKey: r.mr.RKey, RemoteAddr: r.mr.Addr}); err != nil {
				t.Error(err)
			}
			if err := q.PostSend(rc.SendWR{ID: 2, Op: rc.OpRead, Local: r.rbuf, RKey: r.mr.RKey, RemoteAddr: r.mr.Addr + size}); err != nil {
				t.Error(err)
			}
		})
	}
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		mu.Lock()
		for i, r := range runs {
			t.Logf("QP %d: wrote %v read %v err %v", i, r.wrote, r.read, r.err)
		}
		mu.Unlock()
		t.Error("the transfers did not finish in 90 s")
	}
	elapsed := time.Since(start)
	stA, stB := gws[0].Stats(), gws[1].Stats()
	la, lb := path.stats(0), path.stats(1)
	t.Logf("%.1f s; path lost %d A->B and %d B->A; A: CSF %+v", elapsed.Seconds(), la.DroppedLoss, lb.DroppedLoss, stA.Pairing)
	mu.Lock()
	for i, r := range runs {
		if r.err != nil {
			t.Errorf("QP %d: %v", i, r.err)
		} else if !r.wrote || !r.read {
			t.Errorf("QP %d: wrote %v, read %v", i, r.wrote, r.read)
		}
	}
	mu.Unlock()
	var restoredWrite, restoredRead uint64
	for i, r := range runs {
		ab := flow.Key{Src: addrA, Dst: addrB, DestQP: r.qpB} // the requests: A's CSF, B's CRF
		ba := flow.Key{Src: addrB, Dst: addrA, DestQP: r.qpA} // the READ responses: B's CSF, A's CRF
		inB, okB := gws[1].ReceiverFlow(ab)
		inA, okA := gws[0].ReceiverFlow(ba)
		outA, _ := gws[0].SenderFlow(ab)
		outB, okOutB := gws[1].SenderFlow(ba)
		t.Logf("QP %d (%#06x -> %#06x): restored %d of the WRITE (%d sources), %d of the READ (%d sources); A's CSF: reverse QP %#x %v, blocks acked %d, requests %d, unknown block %d",
			i, r.qpA, r.qpB, inB.Restored, inB.Sources, inA.Restored, inA.Sources, outA.ReverseQP, outA.ReverseKnown,
			outA.Stats.BlocksAcked, outA.Stats.RequestsReceived, outA.Stats.RequestsUnknownBlock)
		// Each QP's flows restore, one way at least. Not each way: a QP's WRITE is its first
		// thousand packets or so, and on a loaded host most of them can cross before its
		// session is up (unprotected, counted), leaving a loss or two to RDMA. Over the QPs
		// both ways must restore (below).
		restoredWrite, restoredRead = restoredWrite+inB.Restored, restoredRead+inA.Restored
		if inB.Restored+inA.Restored == 0 {
			t.Errorf("QP %d: the CRFs restored %d of the WRITE (%d abandoned) and %d of the READ (%d abandoned): want some (B's CRF holds the flow: %v; A's CRF: %v; B's CSF of the READ: %v, state %v, %+v)",
				i, inB.Restored, inB.Abandoned, inA.Restored, inA.Abandoned, okB, okA, okOutB, outB.State, outB.Stats)
		}
		if !outA.ReverseKnown || outA.ReverseQP != r.qpA {
			t.Errorf("QP %d: flow to %#x paired with %#x (%v), want its requester's QP %#x", i, r.qpB, outA.ReverseQP, outA.ReverseKnown, r.qpA)
		}
		// C9: only the QP's own responses reach its CSF, and they acknowledge only its PSNs.
		sent := r.cb.Counts().Sent
		if outA.Stats.ReverseObserved == 0 || outA.Stats.ReverseObserved > sent {
			t.Errorf("QP %d: its CSF was offered %d packets passing back; its responder sent %d", i, outA.Stats.ReverseObserved, sent)
		}
		used := uint32(size/mtu + r.readSize/mtu) // the PSNs of its WRITE and its READ
		if !outA.AckedKnown || outA.Stats.BlocksAcked == 0 {
			t.Errorf("QP %d: its CSF released nothing (%d blocks acked)", i, outA.Stats.BlocksAcked)
		} else if d := r.sendPSN.Add(-1).Forward(outA.AckedThrough); d > used {
			t.Errorf("QP %d: its CSF released through %v, %d PSNs past its first %v; it used %d", i, outA.AckedThrough, d, r.sendPSN, used)
		}
	}
	if restoredWrite == 0 || restoredRead == 0 {
		t.Errorf("over the %d QPs the CRFs restored %d of the WRITEs and %d of the READs: want some of each", len(runs), restoredWrite, restoredRead)
	}
	for i, st := range []gateway.Stats{stA, stB} {
		if n := st.Sender.CloseSent + st.Sender.CloseReceived + st.Receiver.CloseSent + st.Receiver.CloseReceived; n != 0 {
			t.Errorf("gateway %c: %d CLOSE before the end (CSF sent %v received %v, CRF sent %v received %v)", 'A'+i, n,
				st.Sender.CloseSentByReason, st.Sender.CloseReceivedByReason, st.Receiver.CloseSentByReason, st.Receiver.CloseReceivedByReason)
		}
	}
	if elapsed > 30*time.Second {
		t.Logf("slow: %.1f s (want under 30 s on an idle machine)", elapsed.Seconds())
	}
}
