package sim

import (
	"container/heap"
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// pathNode is a network node part-way along one link that runs a path reporter (package
// reporter, PATH_REPORT method 3: node-local drop accounting). It sits at the fraction at of the
// link's one-way propagation delay. Where it is, and when what happens there (S19):
//
//   - A loss of the link's loss model is a corrupted frame: the packet has left the link's
//     queue and its serialization, and the node's frame check rejects it on arrival, at the
//     instant the packet's last bit leaves the queue plus at x the one-way delay; the node
//     reports it with Cause corruption.
//   - A link with a finite queue (the congested bottleneck) has that queue at the node: a
//     constant delay in front of a FIFO queue only shifts it, so the netem link's queue at its
//     input is the node's queue seen at x the one-way delay earlier, and every delivery time
//     is unchanged. A tail drop happens at the node when the packet reaches the full queue, at
//     the send instant plus at x the one-way delay, with Cause congestion; the node tells its
//     reporter the queueing delay every packet of the link meets there (its sojourn, or the
//     backlog it found when it was dropped).
//   - A link with an unbounded queue has it at the sender (its egress port at the line rate):
//     packets reach the node already serialized at the rate it forwards them, so the node's own
//     queue stays empty and its reporter is told no queueing delay (Queue Delay Change 0).
//
// Only RoCEv2 source packets of the link's protected flow (to the flow's destination QP) are
// reported. A PATH_REPORT leaves the node when the reporter sends it and reaches the flow's
// source side after at x the reverse link's one-way delay, without queueing (the reverse
// direction carries acknowledgements and CREM messages only, far below its rate), meeting a
// loss process of the reverse link's kind and rate drawn from its own stream, so that the reverse
// link's own draws stay those of the scheme without reporters.
type pathNode struct {
	side int
	at   float64
	addr netip.AddrPort
	rep  *reporter.Reporter
	key  reporter.FlowKey
	// fwd and rev are the one-way delays of the link and of the reverse link.
	fwd, rev time.Duration
	// queued: the link's queue is finite, so it is this node's.
	queued bool
	loss   netem.LossModel

	events   nodeEvents
	seq      uint64
	back     []inReport // reports on their way back, in arrival order
	lastTick time.Duration
	stats    NodeStats
}

// NodeStats counts what a path node saw and sent.
type NodeStats struct {
	Drops            uint64 // drops of the flow's source packets told to the reporter
	Congestion       uint64 // of which tail drops (Cause congestion)
	Corruption       uint64 // of which losses on the wire (Cause corruption)
	DelaySamples     uint64 // queueing delays told to the reporter
	Reports          uint64 // PATH_REPORTs the reporter sent
	ReportsLost      uint64 // lost on the way back
	ReportsDelivered uint64 // handed to the CSF beside the flow's source
	ReportsNoCSF     uint64 // addressed elsewhere, or no CSF on that side: not delivered
	// DelayRising counts delivered reports with a hop entry whose Queue Delay Change is
	// positive.
	DelayRising uint64
}

type inReport struct {
	at   time.Duration
	to   netip.AddrPort
	data []byte
}

// nodeEvent is something that happens at the node: a drop or a queueing delay sample.
type nodeEvent struct {
	at    time.Duration
	seq   uint64
	drop  bool
	psn   psn.PSN
	cause wire.Cause
	delay time.Duration
}

type nodeEvents []nodeEvent

func (h nodeEvents) Len() int { return len(h) }
func (h nodeEvents) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h nodeEvents) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *nodeEvents) Push(x any)   { *h = append(*h, x.(nodeEvent)) }
func (h *nodeEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// nodePort is the reporter's port number for the link it sits on.
const nodePort = 1

// newPathNode builds the node on link side (0: A to B) at fraction at, reporting the flow key.
func newPathNode(side int, at float64, addr netip.Addr, id uint32, key reporter.FlowKey, link, reverse netem.Config,
	loss netem.LossModel) (*pathNode, error) {
	if !(at > 0 && at <= 1) {
		return nil, fmt.Errorf("sim: path reporter at %v of the link: want a fraction in (0, 1]", at)
	}
	rep, err := reporter.New(reporter.Config{NodeID: id, Port: csfPort})
	if err != nil {
		return nil, fmt.Errorf("sim: path reporter: %w", err)
	}
	if loss == nil {
		loss = netem.None{}
	}
	return &pathNode{side: side, at: at, addr: netip.AddrPortFrom(addr, csfPort), rep: rep, key: key,
		fwd: link.Delay, rev: reverse.Delay, queued: link.Rate > 0 && (link.QueuePackets > 0 || link.QueueBytes > 0),
		loss: loss, lastTick: -1}, nil
}

// offset is the time from the link's input (fwd) or to the source side (rev) to the node.
func (n *pathNode) offset(d time.Duration) time.Duration { return time.Duration(n.at * float64(d)) }

// sent takes a packet the connection handed to the node's link at now with the link's verdict;
// busy is the link's BusyUntil right after.
func (n *pathNode) sent(now time.Duration, pkt []byte, v netem.Verdict, busy time.Duration) {
	x := n.offset(n.fwd)
	if n.queued {
		// The packet's sojourn in the node's queue: until its last bit leaves, or the backlog
		// it found full.
		n.push(nodeEvent{at: now + x, delay: max(busy-now, 0)})
		n.stats.DelaySamples++
	}
	if v == netem.Queued || len(pkt) < roce.BTHLen || !roce.Opcode(pkt[0]).Info().Source {
		return
	}
	if qp := uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7]); qp != n.key.FlowLabel {
		return
	}
	p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
	e := nodeEvent{drop: true, psn: p}
	if v == netem.DroppedOverflow {
		e.at, e.cause = now+x, wire.CauseCongestion
	} else {
		// Lost on the wire after the queue: found corrupt on arrival at the node.
		e.at, e.cause = max(busy, now)+x, wire.CauseCorruption
	}
	n.push(e)
}

func (n *pathNode) push(e nodeEvent) {
	n.seq++
	e.seq = n.seq
	heap.Push(&n.events, e)
}

// local returns when the node next has something of its own to do: an event or the reporter's
// timer.
func (n *pathNode) local() (time.Duration, bool) {
	t, ok := n.rep.NextDeadline()
	if ok && t <= n.lastTick {
		t = n.lastTick + 1 // a timer that did not move: never twice at one instant
	}
	if len(n.events) > 0 && (!ok || n.events[0].at <= t) {
		return n.events[0].at, true
	}
	return t, ok
}

// NextDeadline returns when the node next needs run.
func (n *pathNode) NextDeadline() (time.Duration, bool) {
	t, ok := n.local()
	if len(n.back) > 0 && (!ok || n.back[0].at < t) {
		return n.back[0].at, true
	}
	return t, ok
}

// run does everything due by now, in time order, and hands the reports that have come back to
// deliver.
func (n *pathNode) run(now time.Duration, deliver func(to netip.AddrPort, from netip.AddrPort, pkt []byte)) {
	for range 1 << 20 {
		t, ok := n.local()
		if !ok || t > now {
			break
		}
		if len(n.events) > 0 && n.events[0].at == t {
			e := heap.Pop(&n.events).(nodeEvent)
			if e.drop {
				n.rep.Drop(e.at, n.key, nodePort, e.psn, e.cause)
				n.stats.Drops++
				if e.cause == wire.CauseCongestion {
					n.stats.Congestion++
				} else {
					n.stats.Corruption++
				}
			} else {
				n.rep.QueueDelay(e.at, nodePort, e.delay)
			}
			continue
		}
		n.rep.Tick(t)
		n.lastTick = t
		back := t + n.offset(n.rev)
		n.rep.Drain(func(d reporter.Datagram) {
			n.stats.Reports++
			if n.loss.Drop() {
				n.stats.ReportsLost++
				return
			}
			n.back = append(n.back, inReport{at: back, to: d.To, data: d.Payload})
		})
	}
	i := 0
	for ; i < len(n.back) && n.back[i].at <= now; i++ {
		deliver(n.back[i].to, n.addr, n.back[i].data)
	}
	if i > 0 {
		n.back = append(n.back[:0], n.back[i:]...)
	}
}
