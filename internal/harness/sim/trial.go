package sim

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/roce"
)

// LossKind names how a cell's drop rate becomes a loss process.
type LossKind string

// The loss processes.
const (
	LossBernoulli LossKind = "bernoulli" // independent drops, both directions
	LossBursty    LossKind = "bursty"    // Gilbert-Elliott with a mean burst of BurstLen
	LossQueue     LossKind = "queue"     // overflow of a shared bottleneck queue with ECN marks
)

// Params describe one trial: the path, the message and the scheme.
type Params struct {
	// Stop, if set, ends the trial when it becomes true (checked at every event): Run then
	// returns ErrCancelled, and the trial has no outcome.
	Stop     *atomic.Bool
	Scheme   Scheme
	Rate     int64         // bit/s, both directions, and the QPs' preset rate
	RTT      time.Duration // twice the one-way propagation delay
	MTU      int
	Size     int64 // message octets
	DropRate float64
	Loss     LossKind
	BurstLen float64 // LossBursty: mean burst length in packets
	// PolicyBurst is the mean burst length the project's policy assumes (S18); 0 takes the
	// path's: BurstLen under LossBursty, 1 (independent loss) otherwise.
	PolicyBurst float64
	// InitialLoss, when positive, is the CREM sender's starting loss estimate (and so its first
	// m) in place of the path's drop rate (none under LossQueue).
	InitialLoss float64
	// NoECN makes the bottleneck of LossQueue mark no CE: a queue without ECN, whose drops
	// only a path reporter can tell apart from transmission loss.
	NoECN bool
	Seed  uint64 // the trial's seed: the same for every scheme, so they see the same draws
	// MaxSlowdown bounds the virtual time of a trial to this many ideal completion times (plus
	// 100 RTTs); a trial that has not completed by then is reported incomplete. 0 means 200.
	MaxSlowdown float64
	// Codec is the CREM engines' codec (CodecAuto: real up to RealCodecLimit, symbolic above).
	Codec Codec
	// MaxEvents bounds the packet events of a trial (64 per packet of the message plus 200000
	// when 0): a trial that would need more is stopped and reported incomplete, with its
	// completion time a lower bound.
	MaxEvents uint64
	// Period is the synthetic regions' pattern length (DefaultPeriod when 0).
	Period int
	// Regions, if set, are reused for the trial's message instead of new ones (a worker's).
	Regions *Regions
}

// Outcome is what one trial measured.
type Outcome struct {
	Completion    time.Duration // post to completion at the sender (the limit when Incomplete)
	Incomplete    bool          // the message had not completed within the limit
	Ideal         time.Duration // injection time of the message alone + one RTT
	MessageOctets int64
	WireOctets    uint64 // everything sent in both directions, IPv4 and UDP headers included
	RepairOctets  uint64 // retransmitted data and CREM repair, on the wire
	Retransmitted uint64 // data packets the requester sent again
	Reverse       uint64 // packets sent from the responder's side
	// ForwardDataLost counts the data packets from the requester's side that the path lost.
	ForwardDataLost uint64
	SecondRound     bool   // a recovery round trip happened: a retransmission or a repair request
	Events          uint64 // packet events of the loop
	KM              []KM   // CREM: the (k, m) the sender chose, over time
	// Proposed are the (k, m) the CREM sender proposed in PARAM_UPDATE after the warm-up,
	// whether or not a block used them before the message ended.
	Proposed []KM
	// CREM: packets the receiver function restored, repair requests it sent, restored packets
	// whose ICRC failed, and coded retransmissions the sender function sent.
	Restored, RepairRequests, ICRCMismatch, CodedRetransmissions uint64
	// CREM: PATH_REPORTs the sender function took and refused, and the extra ordinary repair
	// symbols it sent for reported drops (C16).
	PathReports, PathReportsRejected, ExtraRepair uint64
	// LossReports and MChanges count the LOSS_REPORTs the sender function took and the changes
	// of m it made.
	LossReports, MChanges uint64
	// RepairDenied counts repair symbols of every kind the sender function's budget refused
	// (C11 b).
	RepairDenied uint64
	// Recovery is CREM's recovery of blocks that lost more than their ordinary repair (S20).
	Recovery Recovery
	// Nodes are the path reporters' nodes on the links A to B and B to A, when the scheme has
	// them.
	Nodes [2]NodeStats
}

// KM is one block's code parameters at the time its sender chose them.
type KM struct {
	At   time.Duration
	K, M int
}

// packets returns the PSNs and the wire octets of a WRITE of n octets at MTU mtu.
func writeShape(n int64, mtu int) (pkts int64, octets int64) {
	pkts = max(1, (n+int64(mtu)-1)/int64(mtu))
	hdr := int64(roce.BTHLen + roce.ICRCLen + wireOverhead)
	return pkts, n + pkts*hdr + roce.RETHLen
}

// chunk is the largest WRITE the simulator posts; longer messages are several WRITEs.
const chunk = 1 << 30

// Ideal returns the lossless completion time: injection of the message alone at rate, plus one
// RTT.
func Ideal(size int64, mtu int, rate int64, rtt time.Duration) time.Duration {
	var octets int64
	for left := size; left > 0 || octets == 0; left -= chunk {
		_, o := writeShape(min(left, chunk), mtu)
		octets += o
		if left <= chunk {
			break
		}
	}
	return time.Duration(float64(octets*8)/float64(rate)*float64(time.Second)) + rtt
}

func (p *Params) validate() error {
	var errs []error
	if p.Rate <= 0 {
		errs = append(errs, fmt.Errorf("rate %d bit/s", p.Rate))
	}
	if p.RTT <= 0 {
		errs = append(errs, fmt.Errorf("RTT %v", p.RTT))
	}
	if !rc.ValidMTU(p.MTU) {
		errs = append(errs, fmt.Errorf("MTU %d is not an RDMA MTU", p.MTU))
	}
	if p.Size <= 0 {
		errs = append(errs, fmt.Errorf("message of %d octets", p.Size))
	}
	if p.DropRate < 0 || p.DropRate >= 1 {
		errs = append(errs, fmt.Errorf("drop rate %v outside [0, 1)", p.DropRate))
	}
	if p.MTU <= 0 || p.Size <= 0 {
		// nothing more to check
	} else if pk, _ := writeShape(p.Size, p.MTU); pk >= psn.Modulus/4 {
		errs = append(errs, fmt.Errorf("message of %d packets exceeds a quarter of the PSN space", pk))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim: trial: %w", err)
	}
	return nil
}

// linkConfigs returns the two directions of the path for p.
func (p *Params) linkConfigs() (ab, ba netem.Config, err error) {
	ab = netem.Config{Rate: p.Rate, Delay: p.RTT / 2, Seed: p.Seed ^ 0xab}
	ba = netem.Config{Rate: p.Rate, Delay: p.RTT / 2, Seed: p.Seed ^ 0xba}
	if p.DropRate == 0 {
		return ab, ba, nil
	}
	fwd, rev := mix(p.Seed, 1), mix(p.Seed, 2)
	switch p.Loss {
	case LossBernoulli, "":
		if ab.Loss, err = netem.NewBernoulli(p.DropRate, fwd); err == nil {
			ba.Loss, err = netem.NewBernoulli(p.DropRate, rev)
		}
	case LossBursty:
		b := p.BurstLen
		if b <= 0 {
			b = 4
		}
		if ab.Loss, err = netem.NewGilbertBurst(p.DropRate, b, fwd); err == nil {
			ba.Loss, err = netem.NewGilbertBurst(p.DropRate, b, rev)
		}
	case LossQueue:
		// The bottleneck serves (1-p) of the sender's rate from a finite queue that marks CE
		// beyond a threshold: the losses are congestion (overflow), not corruption.
		ab.Rate = int64(float64(p.Rate) * (1 - p.DropRate))
		ab.QueuePackets, ab.ECNThreshold = 64, 16
		if p.NoECN {
			ab.ECNThreshold = 0
		}
	default:
		err = fmt.Errorf("unknown loss process %q", p.Loss)
	}
	if err != nil {
		return ab, ba, fmt.Errorf("sim: loss: %w", err)
	}
	return ab, ba, nil
}

// reportLoss returns the loss process PATH_REPORTs from the node on link side meet on their way
// back (S19): the kind and rate of the reverse link's, from a stream of their own.
func (p *Params) reportLoss(side int) (netem.LossModel, error) {
	if p.DropRate == 0 {
		return nil, nil
	}
	seed := mix(p.Seed, uint64(11+side))
	var m netem.LossModel
	var err error
	switch p.Loss {
	case LossBernoulli, "":
		m, err = netem.NewBernoulli(p.DropRate, seed)
	case LossBursty:
		b := p.BurstLen
		if b <= 0 {
			b = 4
		}
		m, err = netem.NewGilbertBurst(p.DropRate, b, seed)
	case LossQueue:
		// The reverse link of the congested path loses nothing.
	default:
		err = fmt.Errorf("unknown loss process %q", p.Loss)
	}
	if err != nil {
		return nil, fmt.Errorf("sim: report loss: %w", err)
	}
	return m, nil
}

// gate holds a loss model back until the message is posted: the CREM functions' warm-up
// (S8) crosses a lossless path and draws nothing, so every scheme's message meets the same
// draws from its first packet on.
type gate struct {
	m  netem.LossModel
	on bool
}

func (g *gate) Drop() bool        { return g.on && g.m.Drop() }
func (g *gate) MeanLoss() float64 { return g.m.MeanLoss() }
func (g *gate) String() string    { return g.m.String() }

// mix derives a stream's seed from a trial seed.
func mix(seed, stream uint64) uint64 {
	x := seed ^ stream*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// qpConfigs returns the requester's and the responder's configurations for p.
func (p *Params) qpConfigs() (a, b rc.Config) {
	pk, _ := writeShape(p.Size, p.MTU)
	window := int(min(pk+64, psn.Modulus/4-1))
	base := rc.Config{MTU: p.MTU, Mode: p.Scheme.Mode, SRNoNAK: p.Scheme.NoNAK, Rate: p.Rate,
		RTT: p.RTT, RTO: 3 * p.RTT, SendBuffer: window, RecvWindow: window,
		MaxBuffered: 256 << 20}
	// The QPs reuse their buffers: the connection copies what its links keep (CopySent).
	base.ReuseBuffers = true
	if p.Scheme.CREM == "" || p.symbolic() {
		// Packets never leave the process and no CREM receiver checks a restored packet's
		// ICRC (C12; with the symbolic codec the check is the simulator's own, S17): skip the
		// CRC-32 over every packet.
		base.SkipICRC = true
	}
	a, b = base, base
	if p.Scheme.CREM != "" && !p.symbolic() {
		// The CRF checks the ICRC of every packet it restores, so the requester seals; nothing
		// else needs it: the responder checks nothing and seals nothing, and the requester does
		// not check the responder's ACKs (the CSF reads them for their PSNs only, C9).
		a.SkipICRCCheck, b.SkipICRC = true, true
	}
	// A only requests and B only responds: the other half of each keeps a small window.
	a.RecvWindow, b.SendBuffer = 64, 64
	a.QPN, a.RemoteQPN, b.QPN, b.RemoteQPN = 0x11, 0x22, 0x22, 0x11
	a.SendPSN, a.RecvPSN = psn.PSN(mix(p.Seed, 3)&psn.Mask), psn.PSN(mix(p.Seed, 4)&psn.Mask)
	b.SendPSN, b.RecvPSN = a.RecvPSN, a.SendPSN
	a.LocalAddr, a.RemoteAddr = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	b.LocalAddr, b.RemoteAddr = a.RemoteAddr, a.LocalAddr
	a.LocalPort, a.RemotePort, b.LocalPort, b.RemotePort = 49152, 49153, 49153, 49152
	return a, b
}

// ErrCancelled is Run's error for a trial that Params.Stop ended before it completed.
var ErrCancelled = errors.New("sim: trial cancelled")

// Run runs one trial: it posts the message as RDMA WRITEs at time 0 (after the CREM engines'
// warm-up, when the scheme has them) and runs until the sender's last completion.
func Run(p Params) (Outcome, error) {
	if err := p.validate(); err != nil {
		return Outcome{}, err
	}
	ca, cb := p.qpConfigs()
	a, err := rc.NewQP(ca)
	if err != nil {
		return Outcome{}, fmt.Errorf("sim: requester: %w", err)
	}
	b, err := rc.NewQP(cb)
	if err != nil {
		return Outcome{}, fmt.Errorf("sim: responder: %w", err)
	}
	ab, ba, err := p.linkConfigs()
	if err != nil {
		return Outcome{}, err
	}
	var gates []*gate
	for _, c := range []*netem.Config{&ab, &ba} {
		if c.Loss != nil {
			g := &gate{m: c.Loss}
			c.Loss, gates = g, append(gates, g)
		}
	}
	rs := p.Regions
	if rs == nil {
		rs = &Regions{Seed: mix(p.Seed, 5)}
		defer rs.Free()
	}
	// A message longer than one WRITE is posted as WRITEs of chunk octets that all send the
	// same source and land in the same region of the sink: the content is periodic, so every
	// chunk has the content it would have at its place (S5).
	span := min(p.Size, chunk)
	src, dst, err := rs.get(int(span), p.Period, p.MTU)
	if err != nil {
		return Outcome{}, err
	}
	var shimA, shimB Shim
	var km func(*Outcome)
	var sent *sentPackets
	if p.Scheme.CREM != "" {
		if p.symbolic() {
			sent = &sentPackets{}
		}
		shimA, shimB, km, err = newCREM(&p, &flowEnds{ca.LocalAddr, ca.LocalPort, ca.QPN},
			&flowEnds{cb.LocalAddr, cb.LocalPort, cb.QPN}, sent)
		if err != nil {
			return Outcome{}, err
		}
	}
	c, err := NewConn(a, b, ab, ba, shimA, shimB)
	if err != nil {
		return Outcome{}, err
	}
	c.CopySent = ca.ReuseBuffers
	if snd, ok := shimA.(*cremSender); ok {
		c.track = newRecoveryLog(ca.SendPSN)
		snd.track = c.track
	}
	if at := p.Scheme.ReporterAt; at > 0 {
		keys := [2]reporter.FlowKey{{Src: ca.LocalAddr, Dst: cb.LocalAddr, FlowLabel: cb.QPN},
			{Src: cb.LocalAddr, Dst: ca.LocalAddr, FlowLabel: ca.QPN}}
		cfgs := [2]netem.Config{ab, ba}
		for s := range 2 {
			loss, err := p.reportLoss(s)
			if err != nil {
				return Outcome{}, err
			}
			if c.nodes[s], err = newPathNode(s, at, reporterAddr(s), uint32(101+s), keys[s], cfgs[s], cfgs[1-s], loss); err != nil {
				return Outcome{}, err
			}
		}
	}
	if w, ok := shimA.(warmer); ok {
		if err := w.warm(c); err != nil {
			return Outcome{}, err
		}
	}
	if snd, ok := shimA.(*cremSender); ok && c.track != nil {
		c.track.k = snd.last[0] // the configuration's k, acknowledged in the warm-up
	}
	for _, g := range gates {
		g.on = true
	}
	mr, err := b.RegisterPlacer(int(span), dst, rc.AccessRemoteWrite|rc.AccessLocalWrite)
	if err != nil {
		return Outcome{}, fmt.Errorf("sim: register: %w", err)
	}
	c.CompactWrites(src, span, ca.SendPSN, p.MTU)
	if sent != nil {
		sent.fl, c.sent = &c.fl, sent
	}
	start := c.Now
	n := 0
	for off := int64(0); off < p.Size; off += chunk {
		end := min(off+chunk, p.Size) - off
		wr := rc.SendWR{ID: uint64(n), Op: rc.OpWrite, Local: src[:min(int64(len(src)), end)],
			RemoteAddr: mr.Addr, RKey: mr.RKey}
		if end > int64(len(src)) {
			wr.Length = int(end) // the source repeated
		}
		if err := a.PostSend(wr); err != nil {
			return Outcome{}, fmt.Errorf("sim: post: %w", err)
		}
		n++
	}
	ideal := Ideal(p.Size, p.MTU, p.Rate, p.RTT)
	slow := p.MaxSlowdown
	if slow <= 0 {
		slow = 200
	}
	limit := start + time.Duration(slow*float64(ideal)) + 100*p.RTT
	maxEv := p.MaxEvents
	if maxEv == 0 {
		pk, _ := writeShape(p.Size, p.MTU)
		maxEv = 64*uint64(pk) + 200000
	}
	stopped, cancelled := false, false
	var comps []rc.Completion
	got := 0
	var last time.Duration
	var failed error
	done := func() bool {
		comps = a.PollCompletions(comps[:0])
		for _, k := range comps {
			if k.Kind != rc.KindSend {
				continue
			}
			if k.Status != rc.StatusSuccess {
				failed = fmt.Errorf("sim: %s: WRITE %d completed with %v", p.Scheme.Name, k.ID, k.Status)
			}
			got++
			last = c.Last
		}
		if c.Events > maxEv {
			stopped = true
		}
		if p.Stop != nil && p.Stop.Load() {
			cancelled = true
		}
		return got == n || failed != nil || stopped || cancelled
	}
	runErr := c.RunUntil(done, limit)
	if cancelled && got < n && failed == nil {
		return Outcome{}, ErrCancelled
	}
	if failed != nil {
		if d, ok := shimA.(interface{ debug() string }); ok {
			failed = fmt.Errorf("%w\n%s\n%s\nA %+v\nB %+v", failed, d.debug(), shimB.(interface{ debug() string }).debug(), a.Stats(), b.Stats())
		}
		return Outcome{}, failed
	}
	o := Outcome{Ideal: ideal, MessageOctets: p.Size, Events: c.Events}
	switch {
	case stopped && got < n:
		o.Incomplete = true
		o.Completion = c.Now - start
	case runErr != nil:
		if c.Now <= limit {
			return Outcome{}, fmt.Errorf("sim: %s: %w", p.Scheme.Name, runErr)
		}
		o.Incomplete = true
		o.Completion = limit - start
	default:
		o.Completion = last - start
		if err := dst.check(p.Size); err != nil {
			return Outcome{}, fmt.Errorf("sim: %s: completed but %w", p.Scheme.Name, err)
		}
	}
	o.WireOctets = c.Count[0].Octets + c.Count[1].Octets
	o.RepairOctets = c.Count[0].RepeatOctets + c.Count[0].ShimOcts
	o.Retransmitted = a.Stats().RetransmittedPackets
	o.Reverse = c.Count[1].Packets
	o.ForwardDataLost = c.Count[0].DataDropped
	if km != nil {
		km(&o)
	}
	if c.track != nil {
		o.Recovery = c.track.result()
	}
	for s, n := range c.nodes {
		if n != nil {
			o.Nodes[s] = n.stats
		}
	}
	o.SecondRound = o.Incomplete || o.Retransmitted > 0 || o.RepairRequests > 0 || o.CodedRetransmissions > 0
	return o, nil
}

// warmer is a shim that must exchange messages before a message is posted (CREM's HELLO and
// first PARAM_ACK).
type warmer interface {
	warm(c *Conn) error
}
