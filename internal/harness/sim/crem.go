package sim

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// reporterAddr is the address of the path reporter's node on the link from A to B (side 0) or
// from B to A (side 1).
func reporterAddr(side int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(101 + side)}) }

// The UDP ports of the CREM functions beside the QPs (the CREM port is always explicit, C14).
const (
	csfPort uint16 = 50000
	crfPort uint16 = 50000
)

// cremSender is the shim beside the requester: the CSF observes every packet the requester
// sends and every RDMA packet coming back, and sends repair and session messages of its own.
type cremSender struct {
	s       *csf.Sender
	self    netip.AddrPort // the CSF's address: where path reporters send
	crf     netip.AddrPort
	km      []KM
	last    [2]int
	scratch []byte
	rcv     *cremReceiver
	// track, if set, learns the CSF's blocks from its REPAIR messages; inReport says the
	// datagrams drained now answer a PATH_REPORT.
	track    *recoveryLog
	inReport bool
	// proposed are the configurations the CSF proposed in PARAM_UPDATE (one entry per Config
	// ID), read from its messages as they pass: what the policy chose, applied or not.
	proposed []KM
	lastID   int
}

// cremReceiver is the shim beside the responder: the CRF observes every source packet before
// the responder does, restores lost ones from repair, holds for in-order delivery in the
// ordered mode (C7 a), and answers with repair requests and loss reports.
type cremReceiver struct {
	r    *crf.Receiver
	snd  *cremSender
	csf  netip.AddrPort
	held bool
}

// policyK returns the k a scheme's policy chooses for the trial.
func policyK(p *Params) int {
	switch p.Scheme.CREM {
	case PolicyBest:
		return BestPolicy(p).K
	case PolicyDraft:
		return DraftPolicy(p).K
	}
	return 32
}

// cremOptions returns the CSF options of a scheme's policy for the trial p.
func cremOptions(p *Params) ([]csf.Option, error) {
	switch p.Scheme.CREM {
	case PolicyFixed:
		return []csf.Option{csf.WithConfig(wire.SchemeCauchy, 32, 8, 0), csf.WithAdaptation(false)}, nil
	case PolicyDraft:
		d := DraftPolicy(p)
		return []csf.Option{csf.WithConfig(wire.SchemeCauchy, d.K, d.M, 0), csf.WithInitialLoss(lossEstimate(p))}, nil
	case PolicyBest:
		// The cost rule (P5-P9): the CSF plans each message's repair itself when its WRITE's
		// RETH gives the length (C16), from the loss estimate, SRTT and the link's rate.
		b := BestPolicy(p)
		return []csf.Option{csf.WithConfig(wire.SchemeCauchy, b.K, b.M, 0), csf.WithInitialLoss(lossEstimate(p)),
			csf.WithRule(policy.RuleCost), csf.WithPathRate(float64(p.Rate), true), csf.WithLossBurst(policyBurst(p))}, nil
	}
	return nil, fmt.Errorf("sim: unknown CREM policy %q", p.Scheme.CREM)
}

// newCREM builds the CREM engines beside the QPs of a and b.
// With sent, the engines use the symbolic codec, and restored packets are rebuilt from sent.
func newCREM(p *Params, a, b *flowEnds, sent *sentPackets) (Shim, Shim, func(*Outcome), error) {
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: a.addr, Dst: b.addr, DestQP: b.qpn, SrcPort: a.port}
	csfAddr, crfAddr := netip.AddrPortFrom(a.addr, csfPort), netip.AddrPortFrom(b.addr, crfPort)
	r1 := rand.New(rand.NewPCG(p.Seed, 0xc5f))
	r2 := rand.New(rand.NewPCG(p.Seed, 0xc7f))
	opts, err := cremOptions(p)
	if err != nil {
		return nil, nil, nil, err
	}
	lim := simLimits(p, policyK(p))
	var ropts []crf.Option
	if sent != nil {
		pk, _ := writeShape(p.Size, p.MTU)
		sent.reserve(int(pk)) // one record per packet of the message, sized once
		opts = append(opts, csf.WithEncoder(symEncoder{}))
		ropts = append(ropts, crf.WithDecoders(func() (flow.Decoder, error) { return &symDecoder{packet: sent.packet}, nil }))
	}
	if p.Scheme.ReporterAt > 0 {
		opts = append(opts, csf.WithReporters(reporterAddr(0), reporterAddr(1))) // C14: only these
	}
	s, err := csf.New(append([]csf.Option{csf.WithFlow(desc), csf.WithCRF(crfAddr), csf.WithRandom(r1.Uint64),
		csf.WithRDMAMTU(p.MTU), csf.WithInitialRTT(p.RTT), csf.WithReverseQP(a.qpn), csf.WithLimits(lim),
		csf.WithMaxHeldBlocks(lim.MaxOpenBlocks)}, opts...)...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sim: CREM sender: %w", err)
	}
	set := crf.Settings{Ordered: p.Scheme.Hold, SrcPort: a.port}
	if sent != nil {
		// S17: a symbolic restoration is the packet the requester sent, rebuilt by the
		// simulator, so its ICRC proves nothing and nobody seals one. The check left is that it
		// is a source packet of this flow; the sink's comparison with the source region then
		// covers every byte delivered.
		set.Verify, set.Verifier = crf.VerifyFunc, func(pkt []byte) error { return checkRestored(pkt, b.qpn) }
	}
	r, err := crf.New(append([]crf.Option{crf.WithRandom(r2.Uint64), crf.WithInitialRTT(p.RTT), crf.WithLimits(lim),
		crf.WithMemory(1 << 40), crf.WithSettings(func(flow.Descriptor) (crf.Settings, bool) { return set, true })},
		ropts...)...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sim: CREM receiver: %w", err)
	}
	snd := &cremSender{s: s, self: csfAddr, crf: crfAddr, lastID: -1}
	rcv := &cremReceiver{r: r, snd: snd, csf: csfAddr}
	snd.rcv = rcv
	return snd, rcv, func(o *Outcome) {
		o.KM, o.Proposed = snd.km, snd.proposed
		fs := r.Stats().Flows
		o.Restored, o.RepairRequests, o.ICRCMismatch = fs.Restored, fs.Requests, fs.ICRCMismatch
		st := s.Stats()
		o.CodedRetransmissions = st.RetxSent
		o.PathReports, o.PathReportsRejected, o.ExtraRepair = st.PathReports, st.PathReportsRejected, st.ExtraSent
		o.RepairDenied = st.RepairDeniedBudget
		o.LossReports, o.MChanges = st.LossReports, st.MChanges
	}, nil
}

// simLimits are the limits both CREM functions declare for a trial: symbols hold whole
// 4 KiB-MTU packets, Max k is the policy's k (a trial never changes k), and the open blocks cover
// what can be unacknowledged at once (the message, or two RTTs of packets at the line rate, in
// blocks of k), up to the wire's maximum. The CRF's window is Max Open Blocks x Max k PSNs
// (C7 b), so these bounds keep it to the packets in flight.
func simLimits(p *Params, k int) flow.Limits {
	pk, octets := writeShape(p.Size, p.MTU)
	perPkt := float64(octets) / float64(pk) * 8 / float64(p.Rate)
	inflight := min(pk, int64(2*p.RTT.Seconds()/perPkt)+1)
	l := flow.DefaultLimits()
	l.MaxK, l.MaxM = max(k, 1), 64
	l.MaxT = max(l.MaxT, p.MTU+64) // a whole packet and its length prefix, no more: the CRF sizes its buffers by it
	l.MaxOpenBlocks = int(min(0xffff, inflight/int64(max(k, 1))+64))
	return l
}

// flowEnds names one end of the protected flow.
type flowEnds struct {
	addr netip.Addr
	port uint16
	qpn  uint32
}

func (c *cremSender) drain(now time.Duration, send func([]byte)) {
	c.s.Drain(func(d flow.Datagram) {
		if c.track != nil {
			c.track.repair(d.Payload, c.inReport)
		}
		if len(d.Payload) > 0 && wire.Type(d.Payload[0]&0x0f) == wire.TypeParamUpdate {
			if u, err := wire.ParseParamUpdate(d.Payload); err == nil && int(u.ConfigID) != c.lastID {
				c.lastID = int(u.ConfigID)
				c.proposed = append(c.proposed, KM{At: now, K: int(u.K), M: int(u.M)})
			}
		}
		send(d.Payload) // the connection copies it
	})
	if cfg, ok := c.s.Config(); ok && (cfg.K != c.last[0] || cfg.M != c.last[1] || len(c.km) == 0) {
		c.last = [2]int{cfg.K, cfg.M}
		c.km = append(c.km, KM{At: now, K: cfg.K, M: cfg.M})
	}
}

func (c *cremSender) Egress(now time.Duration, pkt []byte, pass, send func([]byte)) {
	c.s.Observe(now, pkt)
	pass(pkt)
	c.drain(now, send)
}

func (c *cremSender) Ingress(now time.Duration, pkt []byte, shim, ce bool, deliver, send func([]byte)) {
	if shim {
		c.s.Handle(now, c.crf, pkt)
	} else {
		c.s.ObserveReverse(now, pkt)
		deliver(pkt)
	}
	c.drain(now, send)
}

// report hands the CSF a PATH_REPORT from the reporter at from (C10, C16).
func (c *cremSender) report(now time.Duration, from netip.AddrPort, pkt []byte, send func([]byte)) {
	c.inReport = true
	c.s.Handle(now, from, pkt)
	c.drain(now, send)
	c.inReport = false
}

func (c *cremSender) Tick(now time.Duration, deliver, send func([]byte)) {
	if t, ok := c.s.NextDeadline(); ok && t <= now {
		c.s.Tick(now)
	}
	c.drain(now, send)
}

func (c *cremSender) NextDeadline() (time.Duration, bool) { return c.s.NextDeadline() }

// warm runs the session until the first configuration is acknowledged (HELLO, HELLO_ACK,
// PARAM_UPDATE, PARAM_ACK), so a message posted next is protected from its first packet.
func (c *cremSender) warm(conn *Conn) error {
	c.s.Start(conn.Now)
	c.drain(conn.Now, conn.shimf[0])
	limit := conn.Now + 50*time.Second
	err := conn.RunUntil(func() bool {
		_, ok := c.s.Config()
		return ok && c.s.State() == csf.StateEstablished
	}, limit)
	if err != nil {
		return fmt.Errorf("sim: CREM warm-up: %w", err)
	}
	c.km, c.proposed = c.km[:0], c.proposed[:0]
	if cfg, ok := c.s.Config(); ok {
		c.last = [2]int{cfg.K, cfg.M}
		c.km = append(c.km, KM{At: 0, K: cfg.K, M: cfg.M})
	}
	return nil
}

func (c *cremReceiver) drain(deliver, send func([]byte)) {
	c.r.Drain(func(d flow.Datagram) { send(d.Payload) }) // the connection copies it
	c.r.DrainDeliveries(func(d crf.Delivery) {
		if d.Kind != crf.Abandoned && d.Packet != nil {
			deliver(d.Packet)
		}
	})
}

func (c *cremReceiver) Egress(now time.Duration, pkt []byte, pass, send func([]byte)) { pass(pkt) }

func (c *cremReceiver) Ingress(now time.Duration, pkt []byte, shim, ce bool, deliver, send func([]byte)) {
	if shim {
		c.r.Handle(now, c.csf, pkt, ce)
	} else if c.r.Observe(now, c.snd.s.FlowID(), pkt, ce) == crf.Forward {
		deliver(pkt)
	}
	c.drain(deliver, send)
}

func (c *cremReceiver) Tick(now time.Duration, deliver, send func([]byte)) {
	if t, ok := c.r.NextDeadline(); ok && t <= now {
		c.r.Tick(now)
	}
	c.drain(deliver, send)
}

func (c *cremReceiver) NextDeadline() (time.Duration, bool) { return c.r.NextDeadline() }

// Policy is a CREM sender's code for a message: k positions per block, m ordinary repair
// symbols per block of any message, and Extra more per block of a message known to be long
// (C16), so that blocks of a long message carry m + Extra.
type Policy struct {
	K, M, Extra int
}

// lossEstimate is the loss rate the sender's estimator holds for a warm flow on the trial's
// path: the drop rate of random loss; none for congestion loss, which the estimator does not
// count as random loss (C11), so m must not rise with it.
func lossEstimate(p *Params) float64 {
	if p.InitialLoss > 0 {
		return p.InitialLoss
	}
	if p.Loss == LossQueue {
		return 0
	}
	return p.DropRate
}

// DraftPolicy is the draft's recommendation at the flow's loss estimate: k = 32 and the
// smallest m with P[Binomial(k+m, p) > m] < 1e-4, unless coded retransmission alone meets
// rho = 0.01 (RULINGS C6).
func DraftPolicy(p *Params) Policy {
	k := policy.DefaultK
	return Policy{K: k, M: policy.ChooseM(k, lossEstimate(p), policy.DefaultEpsilon, policy.DefaultRho, maxM)}
}

// maxM is the largest m the simulator's CREM functions declare.
const maxM = 64

// policyBurst is the mean loss burst the project's policy assumes: PolicyBurst, by default the
// path's (S18: the estimator does not measure it).
func policyBurst(p *Params) float64 {
	switch {
	case p.PolicyBurst > 0:
		return max(1, p.PolicyBurst)
	case p.Loss == LossBursty:
		if p.BurstLen <= 0 {
			return 4
		}
		return max(1, p.BurstLen)
	}
	return 1
}

// CostPath is what the cost rule knows of the trial's path once the flow is warm (P5): the loss
// estimate, the assumed burst, the round cost at the path's RTT and the time one symbol (the RDMA
// MTU with its headers and length prefix) takes at the link's rate.
func CostPath(p *Params) policy.Path {
	return policy.Path{Loss: lossEstimate(p), Burst: policyBurst(p), Round: policy.RoundCost(p.RTT),
		Symbol: policy.SymbolTime(p.MTU+64, float64(p.Rate), true), MaxM: maxM, MaxK: 128}
}

// BestPolicy is the project's policy for the trial's message, the cost rule (P9): the sender
// knows the message's length (the RETH's DMA Length), and plans k and the repair of the blocks
// whose loss would delay its end; the configuration's m is 0 (the other blocks need none). Extra
// is the repair of the critical blocks.
func BestPolicy(p *Params) Policy {
	pk, _ := writeShape(min(p.Size, chunk), p.MTU)
	pl := policy.PlanMessage(int(pk), CostPath(p))
	return Policy{K: pl.K, M: 0, Extra: pl.TailM}
}

func (c *cremSender) debug() string   { return fmt.Sprintf("csf %v %+v", c.s.State(), c.s.Stats()) }
func (c *cremReceiver) debug() string { return fmt.Sprintf("crf %+v", c.r.Stats()) }

// checkRestored is the simulator's check of a symbolically restored packet (S17): a RoCEv2
// source packet to QP qpn with room for its ICRC.
func checkRestored(pkt []byte, qpn uint32) error {
	h, n, err := roce.ParseBTH(pkt)
	switch {
	case err != nil:
		return fmt.Errorf("sim: restored packet: %w", err)
	case h.DestQP != qpn:
		return fmt.Errorf("sim: restored packet to QP %#x, want %#x", h.DestQP, qpn)
	case !h.OpCode.Info().Source:
		return fmt.Errorf("sim: restored packet of opcode %#x is not a source", uint8(h.OpCode))
	case len(pkt) < n+roce.ICRCLen:
		return fmt.Errorf("sim: restored packet of %d octets", len(pkt))
	}
	return nil
}
