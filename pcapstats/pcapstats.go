// Package pcapstats summarises the CREM and RoCEv2 traffic of a packet capture: CREM messages by
// type and kind, flows, blocks, repair symbols, coded retransmissions, requests, reports and
// CLOSE reasons, an estimate of the packets restored, and the RoCEv2 packets of each destination
// QP (data, retransmissions, ACKs and NAKs, extended ACKs with a T/C AETH, READs, ICRC).
//
// The package is pure: frames or datagrams go in (Analyzer.Frame, Analyzer.Datagram, or Read
// for a whole pcap or pcapng stream), a Summary comes out. Nothing a capture holds can make it
// panic, and what it remembers (flows, blocks, QPs, PSNs) is bounded by Limits; what lies beyond
// the bounds is still counted in the totals and named as untracked.
//
// Frames with IPv4 TTL 1 or IPv6 hop limit 1 are, with Options.DropsMarked, datagrams an
// impairment dropped: `crem lab --pcap` and `crem netem --pcap` record every datagram of the
// path once, either as it left the path or, marked so, where it was dropped.
package pcapstats

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// Limits bound what an Analyzer remembers. Zero values take the defaults.
type Limits struct {
	MaxFlows  int // default 4096
	MaxBlocks int // over all flows; default 1 << 20
	MaxQPs    int // default 4096
	MaxPSNs   int // PSNs remembered over all QPs; default 1 << 22
}

// Options configure an Analyzer.
type Options struct {
	// CREMPort is the UDP port CREM messages are sent to. It has no default (RULINGS C14): a
	// deployment chooses it, and guessing would misread other traffic.
	CREMPort int
	// RoCEPort is the UDP destination port of RoCEv2 (4791 as IANA assigns it). 0 takes any
	// UDP datagram not to the CREM port that parses whole as RoCEv2 with transport version 0 and
	// a known opcode: the captures of `crem lab`, whose path carries RoCEv2 between other ports.
	RoCEPort int
	// DropsMarked: frames with IPv4 TTL 1 or IPv6 hop limit 1 are datagrams dropped on the path.
	DropsMarked bool
	Limits      Limits
}

// psnState bits: what the capture showed of one PSN of a QP.
const (
	psnSeen      = 1 << iota // some transmission
	psnDelivered             // a transmission not marked dropped
	psnData                  // a data packet (SEND, WRITE, READ response)
)

type qpState struct {
	QP
	psns map[uint32]uint8
	full bool // a PSN could not be remembered
}

type blockKey struct {
	config uint8
	start  psn.PSN
}

type blockState struct {
	k         uint8
	present   psn.Bitmap
	delivered uint64 // symbols not marked dropped
}

type flowState struct {
	Flow
	addrs  map[string]bool
	blocks map[blockKey]*blockState
	order  []blockKey
	cfgs   [256]bool
}

type helloSeen struct {
	hello    FlowHello
	answered bool
}

// Analyzer accumulates a Summary. It is not safe for concurrent use.
type Analyzer struct {
	o      Options
	s      Summary
	flows  map[uint32]*flowState
	forder []uint32
	blocks int
	qps    map[uint32]*qpState
	qorder []uint32
	psns   int
	hellos map[uint64]*helloSeen // by Sender Nonce
	paths  map[pathKey]int       // index into s.CREM.PathReports.Flows
}

type pathKey struct {
	src, dst netip.Addr
	label    uint32
}

// New returns an Analyzer. The CREM port is required, and must differ from the RoCEv2 port.
func New(o Options) (*Analyzer, error) {
	if o.CREMPort < 1 || o.CREMPort > 65535 {
		return nil, fmt.Errorf("pcapstats: CREM port %d: want 1 to 65535 (there is no default, RULINGS C14)", o.CREMPort)
	}
	if o.RoCEPort < 0 || o.RoCEPort > 65535 {
		return nil, fmt.Errorf("pcapstats: RoCEv2 port %d: want 0 (any) or 1 to 65535", o.RoCEPort)
	}
	if o.RoCEPort == o.CREMPort {
		return nil, fmt.Errorf("pcapstats: CREM port and RoCEv2 port are both %d", o.CREMPort)
	}
	l := &o.Limits
	for _, v := range []struct {
		p   *int
		def int
	}{{&l.MaxFlows, 4096}, {&l.MaxBlocks, 1 << 20}, {&l.MaxQPs, 4096}, {&l.MaxPSNs, 1 << 22}} {
		if *v.p < 0 {
			return nil, fmt.Errorf("pcapstats: negative limit %d", *v.p)
		}
		if *v.p == 0 {
			*v.p = v.def
		}
	}
	a := &Analyzer{o: o, flows: map[uint32]*flowState{}, qps: map[uint32]*qpState{}, hellos: map[uint64]*helloSeen{},
		paths: map[pathKey]int{}}
	a.s.CREM.Port, a.s.RoCE.Port = o.CREMPort, o.RoCEPort
	return a, nil
}

// Read summarises a whole pcap or pcapng stream. A stream that is not a capture is an error; one
// cut short returns the summary of what was read with the error.
func Read(r io.Reader, o Options) (Summary, error) {
	a, err := New(o)
	if err != nil {
		return Summary{}, err
	}
	cr, err := capture.NewReader(r)
	if err != nil {
		return Summary{}, fmt.Errorf("pcapstats: %w", err)
	}
	for {
		fr, err := cr.Next()
		if err == io.EOF {
			return a.Summary(), nil
		}
		if err != nil {
			return a.Summary(), fmt.Errorf("pcapstats: after frame %d: %w", a.s.Frames.Total, err)
		}
		a.Frame(fr.LinkType, fr.Data, fr.OrigLen)
	}
}

// Frame takes one captured frame of the given link type; origLen is its length on the wire
// (above len(data) when the capture cut it).
func (a *Analyzer) Frame(link capture.LinkType, data []byte, origLen int) {
	f := &a.s.Frames
	f.Total++
	d, err := capture.DecodeUDP(link, data)
	switch {
	case err == nil:
	case errors.Is(err, capture.ErrNotUDP):
		f.NotUDP++
		return
	case errors.Is(err, capture.ErrFragment):
		f.Fragments++
		return
	case origLen > len(data):
		f.Cut++
		return
	default:
		f.Undecodable++
		if f.FirstError == "" {
			f.FirstError = fmt.Sprintf("frame %d: %v", f.Total, err)
		}
		return
	}
	// DecodeUDP found the whole UDP datagram: a cut frame lost only link padding or trailers.
	a.Datagram(d)
}

// dropped reports whether d is marked dropped: TTL or hop limit 1.
func (a *Analyzer) dropped(d *capture.Datagram) bool {
	if !a.o.DropsMarked {
		return false
	}
	switch d.IPVersion() {
	case 4:
		return len(d.IPHeader) >= 20 && d.IPHeader[8] == 1
	case 6:
		return len(d.IPHeader) >= 40 && d.IPHeader[7] == 1
	}
	return false
}

// Datagram takes one UDP datagram (as capture.DecodeUDP returns it).
func (a *Analyzer) Datagram(d capture.Datagram) {
	a.s.Frames.UDP++
	drop := a.dropped(&d)
	if drop {
		a.s.Frames.Dropped++
	}
	switch port := int(d.Dst.Port()); {
	case port == a.o.CREMPort:
		a.crem(&d, drop)
	case port == a.o.RoCEPort:
		a.roce(&d, drop, true)
	case a.o.RoCEPort == 0 && looksRoCE(d.Payload):
		a.roce(&d, drop, false)
	default:
		a.s.Frames.OtherUDP++
	}
}

// looksRoCE: a whole RoCEv2 packet, transport version 0, a known opcode (protocol notes U6).
func looksRoCE(b []byte) bool {
	p, err := roce.ParsePacket(b)
	return err == nil && p.BTH.TVer == 0
}

// Summary returns the summary so far. The Analyzer may take more frames afterwards.
func (a *Analyzer) Summary() Summary {
	s := a.s
	s.CREM.PathReports.Flows = make([]PathFlow, len(a.s.CREM.PathReports.Flows))
	for i, f := range a.s.CREM.PathReports.Flows {
		f.PSNs = append([]uint32{}, f.PSNs...)
		s.CREM.PathReports.Flows[i] = f
	}
	s.CREM.Flows = make([]Flow, 0, len(a.forder))
	s.CREM.Restored = RestoredEstimate{}
	for _, id := range a.forder {
		fs := a.flows[id]
		f := fs.Flow
		f.Addresses = make([]string, 0, len(fs.addrs))
		for k := range fs.addrs {
			f.Addresses = append(f.Addresses, k)
		}
		sort.Strings(f.Addresses)
		f.ConfigIDs = []uint8{}
		for c, ok := range fs.cfgs {
			if ok {
				f.ConfigIDs = append(f.ConfigIDs, uint8(c))
			}
		}
		if f.Hello != nil {
			h := *f.Hello
			f.Hello = &h
		}
		f.Restored = a.estimate(fs)
		r := &s.CREM.Restored
		r.Packets += f.Restored.Packets
		r.Missing += f.Restored.Missing
		r.Blocks += f.Restored.Blocks
		r.Unmapped += f.Restored.Unmapped
		r.Untracked += f.Restored.Untracked
		s.CREM.Flows = append(s.CREM.Flows, f)
	}
	s.CREM.Hellos = HelloCounts{}
	for _, h := range a.hellos {
		if h.answered {
			s.CREM.Hellos.Answered++
		} else {
			s.CREM.Hellos.Unanswered++
		}
	}
	s.RoCE.QPCounts = QPCounts{}
	s.RoCE.QPs = make([]QP, 0, len(a.qorder))
	for _, qp := range a.qorder {
		q := a.qps[qp]
		x := q.QP
		x.MissingPSNs = 0
		for _, st := range q.psns {
			if st&psnData != 0 && st&psnDelivered == 0 {
				x.MissingPSNs++
			}
		}
		s.RoCE.QPCounts.add(&x.QPCounts)
		s.RoCE.QPs = append(s.RoCE.QPs, x)
	}
	return s
}

// estimate is the restored estimate of one flow (see RestoredEstimate).
func (a *Analyzer) estimate(fs *flowState) RestoredEstimate {
	var r RestoredEstimate
	n := uint64(len(fs.order))
	if fs.Hello == nil {
		r.Unmapped = n
		return r
	}
	q := a.qps[fs.Hello.DestQP]
	if q != nil && q.full {
		r.Untracked = n
		return r
	}
	for _, k := range fs.order {
		b := fs.blocks[k]
		var missing uint64
		b.present.Each(func(j int) {
			if j >= int(b.k) {
				return
			}
			var st uint8
			if q != nil {
				st = q.psns[uint32(k.start.Add(j))]
			}
			if st&psnDelivered == 0 {
				missing++
			}
		})
		r.Blocks++
		r.Missing += missing
		r.Packets += min(missing, b.delivered)
	}
	return r
}

// flow returns the state of a flow, or nil beyond MaxFlows.
func (a *Analyzer) flow(id uint32) *flowState {
	if f := a.flows[id]; f != nil {
		return f
	}
	if len(a.flows) >= a.o.Limits.MaxFlows {
		return nil
	}
	f := &flowState{Flow: Flow{FlowID: id}, addrs: map[string]bool{}, blocks: map[blockKey]*blockState{}}
	a.flows[id] = f
	a.forder = append(a.forder, id)
	return f
}

const maxAddrPairs = 8

func (f *flowState) addr(csf, crf netip.Addr) {
	k := csf.String() + " -> " + crf.String()
	if !f.addrs[k] && len(f.addrs) < maxAddrPairs {
		f.addrs[k] = true
	}
}

// fromCRF reports whether messages of type t travel from the CRF to the CSF.
func fromCRF(t wire.Type) bool {
	switch t {
	case wire.TypeHelloAck, wire.TypeParamAck, wire.TypeRepairRequest, wire.TypeLossReport:
		return true
	}
	return false
}

func (m *MessageCounts) count(t wire.Type, drop bool) {
	m.Total++
	if drop {
		m.Dropped++
	}
	switch t {
	case wire.TypeRepair:
		m.Repair++
	case wire.TypeHello:
		m.Hello++
	case wire.TypeHelloAck:
		m.HelloAck++
	case wire.TypeParamUpdate:
		m.ParamUpdate++
	case wire.TypeParamAck:
		m.ParamAck++
	case wire.TypeRepairRequest:
		m.RepairRequest++
	case wire.TypeLossReport:
		m.LossReport++
	case wire.TypePathReport:
		m.PathReport++
	case wire.TypeClose:
		m.Close++
	}
}

func (m *MessageCounts) bad(err error, frame uint64) {
	var de *wire.DiscardError
	if errors.As(err, &de) {
		m.Discarded++
		return
	}
	m.Malformed++
	if m.FirstMalformed == "" {
		m.FirstMalformed = fmt.Sprintf("frame %d: %v", frame, err)
	}
}

// crem takes one datagram to the CREM port.
func (a *Analyzer) crem(d *capture.Datagram, drop bool) {
	c := &a.s.CREM
	b := d.Payload
	h, herr := wire.ParseHeader(b)
	if herr != nil && (errors.Is(herr, wire.ErrDiscard) || len(b) < wire.HeaderLen) {
		// No type, or no Flow ID to file it under.
		c.Messages.Total++
		if drop {
			c.Messages.Dropped++
		}
		c.Messages.bad(herr, a.s.Frames.Total)
		return
	}
	var f *flowState
	track := func(id uint32) {
		f = a.flow(id)
		if f == nil {
			c.FlowsUntracked++
			return
		}
		src, dst := d.Src.Addr(), d.Dst.Addr()
		if fromCRF(h.Type) {
			src, dst = dst, src
		}
		f.addr(src, dst)
	}
	fail := func(err error) {
		c.Messages.Total++
		if drop {
			c.Messages.Dropped++
		}
		c.Messages.bad(err, a.s.Frames.Total)
		if f != nil {
			f.Messages.Total++
			if drop {
				f.Messages.Dropped++
			}
			f.Messages.bad(err, a.s.Frames.Total)
		}
	}
	ok := func() {
		c.Messages.count(h.Type, drop)
		if f != nil {
			f.Messages.count(h.Type, drop)
		}
	}
	// HELLO and PATH_REPORT carry Flow ID 0: they belong to no flow yet.
	if h.Type != wire.TypeHello && h.Type != wire.TypePathReport {
		track(h.FlowID)
	}
	if herr != nil {
		// A Length that disagrees with the datagram: the header names the flow.
		fail(herr)
		return
	}
	known, err := a.record(h.Type, b, f, drop)
	switch {
	case err != nil:
		fail(err)
	case known:
		ok()
	}
}

// record parses a CREM message of type t and adds what it says to the summary and to its flow
// f (nil: none). known is false for a type the summary does not break down; err is the parse
// error of a malformed one, which records nothing.
func (a *Analyzer) record(t wire.Type, b []byte, f *flowState, drop bool) (known bool, err error) {
	c := &a.s.CREM
	switch t {
	case wire.TypeRepair:
		m, err := wire.ParseRepair(b)
		if err != nil {
			return true, err
		}
		a.repair(f, &m, drop)
		return true, nil
	case wire.TypeHello:
		m, err := wire.ParseHello(b)
		if err != nil {
			return true, err
		}
		if a.hellos[m.SenderNonce] == nil && len(a.hellos) < a.o.Limits.MaxFlows {
			a.hellos[m.SenderNonce] = &helloSeen{hello: FlowHello{Source: m.Source.String(), Destination: m.Destination.String(),
				FlowKind: uint8(m.FlowKind), FlowLabel: m.FlowLabel, DestQP: m.DestQP(), RDMAMTU: m.RDMAMTU}}
		}
		return true, nil
	case wire.TypeHelloAck:
		m, err := wire.ParseHelloAck(b)
		if err != nil {
			return true, err
		}
		if hs := a.hellos[m.SenderNonce]; hs != nil {
			hs.answered = true
			if f != nil && f.Hello == nil {
				hl := hs.hello
				f.Hello = &hl
			}
		}
		return true, nil
	case wire.TypeParamUpdate:
		if _, err := wire.ParseParamUpdate(b); err != nil {
			return true, err
		}
		return true, nil
	case wire.TypeParamAck:
		if _, err := wire.ParseParamAck(b); err != nil {
			return true, err
		}
		return true, nil
	case wire.TypeRepairRequest:
		m, err := wire.ParseRepairRequest(b)
		if err != nil {
			return true, err
		}
		c.RepairRequests.add(&m)
		if f != nil {
			f.RepairRequests.add(&m)
		}
		return true, nil
	case wire.TypeLossReport:
		m, err := wire.ParseLossReport(b)
		if err != nil {
			return true, err
		}
		c.LossReports.add(&m)
		if f != nil {
			f.LossReports.add(&m)
		}
		return true, nil
	case wire.TypePathReport:
		m, err := wire.ParsePathReport(b)
		if err != nil {
			return true, err
		}
		c.PathReports.add(&m)
		a.pathFlow(&m)
		return true, nil
	case wire.TypeClose:
		m, err := wire.ParseClose(b)
		if err != nil {
			return true, err
		}
		c.Closes.add(m.Reason)
		if f != nil {
			f.Closes.add(m.Reason)
		}
		return true, nil
	}
	return false, nil
}

func (r *RequestCounts) add(m *wire.RepairRequest) {
	r.Total++
	if m.Fallback {
		r.Fallback++
	} else {
		r.Coded++
	}
	if m.RangeForm {
		r.RangeForm++
		for _, rg := range m.Ranges {
			r.RangePSNs += uint64(rg.Count)
		}
	} else {
		r.BlockForm++
		r.LostPositions += uint64(m.Lost.Count())
	}
}

func (l *LossTotals) add(m *wire.LossReport) {
	l.Count++
	l.IntervalUS += uint64(m.IntervalUS)
	l.Expected += uint64(m.Expected)
	l.Received += uint64(m.Received)
	l.Restored += uint64(m.Restored)
	l.IncompleteBlocks += uint64(m.IncompleteBlocks)
	l.CEMarked += uint64(m.CEMarked)
	l.RepairsReceived += uint64(m.RepairsReceived)
	l.RepairsCEMarked += uint64(m.RepairsCEMarked)
}

func (p *PathTotals) add(m *wire.PathReport) {
	p.Total++
	if m.Truncated {
		p.Truncated++
	}
	switch m.Method {
	case wire.MethodAltMark:
		p.AltMark++
	case wire.MethodClusteredAltMark:
		p.ClusteredAltMark++
	case wire.MethodNodeDrops:
		p.NodeDrops++
	default:
		p.OtherMethod++
	}
	for i := range m.Hops {
		p.Hops++
		p.LostCount += uint64(m.Hops[i].LostCount)
		p.DroppedPSNs += uint64(len(m.Hops[i].DroppedPSNs))
	}
}

// pathFlow files a PATH_REPORT under the flow it describes.
func (a *Analyzer) pathFlow(m *wire.PathReport) {
	p := &a.s.CREM.PathReports
	k := pathKey{m.Source, m.Destination, m.FlowLabel}
	i, ok := a.paths[k]
	if !ok {
		if len(p.Flows) >= MaxPathFlows {
			return
		}
		i = len(p.Flows)
		a.paths[k] = i
		p.Flows = append(p.Flows, PathFlow{Source: m.Source.String(), Destination: m.Destination.String(), FlowLabel: m.FlowLabel,
			PSNs: []uint32{}})
	}
	f := &p.Flows[i]
	f.Reports++
	for j := range m.Hops {
		h := &m.Hops[j]
		f.LostCount += uint64(h.LostCount)
		f.DroppedPSNs += uint64(len(h.DroppedPSNs))
		for _, q := range h.DroppedPSNs {
			if len(f.PSNs) < MaxNamedPSNs {
				f.PSNs = append(f.PSNs, uint32(q))
			}
		}
	}
}

func (c *CloseReasons) add(r wire.Reason) {
	switch r {
	case wire.ReasonNormal:
		c.Normal++
	case wire.ReasonIdle:
		c.Idle++
	case wire.ReasonParamUnanswered:
		c.ParamUnanswered++
	case wire.ReasonResourcesExhausted:
		c.ResourcesExhausted++
	case wire.ReasonCircuitBreaker:
		c.CircuitBreaker++
	case wire.ReasonProtocolError:
		c.ProtocolError++
	default:
		c.Other++
	}
}

func (r *RepairCounts) add(m *wire.Repair, drop bool) (symbol bool) {
	switch {
	case m.Info:
		r.Info++
	case m.Retx:
		r.CodedRetx++
		symbol = true
	case m.Scheme == wire.SchemeSourceCopy:
		r.SourceCopy++
		symbol = true
	default:
		r.Ordinary++
		symbol = true
	}
	if m.Last {
		r.Last++
	}
	r.SymbolOctets += uint64(len(m.Symbol))
	if symbol && !drop {
		r.Delivered++
	}
	return symbol
}

// repair counts a REPAIR message and files it under its block.
func (a *Analyzer) repair(f *flowState, m *wire.Repair, drop bool) {
	c := &a.s.CREM
	symbol := c.Repair.add(m, drop)
	if f == nil {
		return
	}
	f.Repair.add(m, drop)
	f.cfgs[m.ConfigID] = true
	k := blockKey{config: m.ConfigID, start: m.BlockStartPSN}
	b := f.blocks[k]
	if b == nil {
		if a.blocks >= a.o.Limits.MaxBlocks {
			c.BlocksUntracked++
			return
		}
		a.blocks++
		b = &blockState{k: m.K, present: m.Present}
		f.blocks[k] = b
		f.order = append(f.order, k)
		f.Blocks++
		c.Blocks++
	}
	if symbol && !drop {
		b.delivered++
	}
}

// qp returns the state of a destination QP, or nil beyond MaxQPs.
func (a *Analyzer) qp(n uint32) *qpState {
	if q := a.qps[n]; q != nil {
		return q
	}
	if len(a.qps) >= a.o.Limits.MaxQPs {
		return nil
	}
	q := &qpState{QP: QP{DestQP: n}, psns: map[uint32]uint8{}}
	a.qps[n] = q
	a.qorder = append(a.qorder, n)
	return q
}

// roce takes one RoCEv2 datagram; onPort: it was sent to the RoCEv2 port.
func (a *Analyzer) roce(d *capture.Datagram, drop, onPort bool) {
	r := &a.s.RoCE
	if len(d.Payload) < roce.BTHLen {
		r.NoBTH++
		return
	}
	bth, _, _ := roce.ParseBTH(d.Payload)
	q := a.qp(bth.DestQP)
	if q == nil {
		r.QPsUntracked++
		return
	}
	c := &q.QPCounts
	c.Packets++
	if drop {
		c.Dropped++
	}
	if d.Dst.Port() == roce.UDPPort {
		if err := roce.VerifyICRC(d.IPHeader, d.UDPHeader, d.Payload); err != nil {
			c.ICRCBad++
		} else {
			c.ICRCOK++
		}
	} else {
		c.ICRCUnchecked++
	}
	p, err := roce.ParsePacket(d.Payload)
	if err != nil {
		c.Malformed++
		return
	}
	op := p.BTH.OpCode
	info := op.Info()
	low := op & 0x1f
	isRC := info.Transport == roce.TransportRC
	switch {
	case op == roce.OpCNP:
		c.CNPs++
	case isRC && (op == roce.OpAcknowledge || op == roce.OpAtomicAcknowledge):
		switch p.AETH.Type() {
		case roce.AckTypeACK:
			c.ACKs++
		case roce.AckTypeNAK:
			c.NAKs++
			if code, _ := p.AETH.NAKCode(); code == roce.NAKPSNSequenceError {
				c.NAKSequence++
			}
		case roce.AckTypeRNRNAK:
			c.RNRNAKs++
		}
		if p.Has(roce.HasTCAETH) {
			c.ExtendedACKs++
		}
	case isRC && op == roce.OpReadRequest:
		c.ReadRequests++
	case isRC && low >= roce.OpReadResponseFirst && low <= roce.OpReadResponseOnly:
		c.ReadResponses++
	case isRC && (op == roce.OpCompareSwap || op == roce.OpFetchAdd):
		c.Atomics++
	}
	if !info.Source {
		return
	}
	data := info.Headers&roce.HasPayload != 0
	if data {
		c.DataPackets++
	}
	key := uint32(p.BTH.PSN)
	st, seen := q.psns[key]
	if seen {
		c.Retransmissions++
	} else if a.psns >= a.o.Limits.MaxPSNs {
		q.full = true
		r.PSNsUntracked++
		return
	} else {
		a.psns++
	}
	st |= psnSeen
	if !drop {
		st |= psnDelivered
	}
	if data {
		st |= psnData
	}
	q.psns[key] = st
}
