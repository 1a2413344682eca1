package lab

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

// addrReporter is the path reporter's own address: neither end of the path nor a gateway, so
// that a CSF accepting PATH_REPORT from it (C14) accepts nothing the path relays.
var addrReporter = netip.MustParseAddr("127.0.0.5")

// reporterNodeID is the Node ID of the lab's path reporter in its hop entries (127.0.0.5).
const reporterNodeID = 0x7f000005

// ReporterRun is what the path reporter of a run did (runs with "+reporter" only).
type ReporterRun struct {
	// Address is the reporter's socket, whose address the gateways accept PATH_REPORT from.
	Address string `json:"address"`
	// Drops are the RoCEv2 datagrams the path dropped and told the reporter of, by cause:
	// Corruption for the loss model, Congestion for queue overflow.
	Drops      uint64 `json:"drops"`
	Corruption uint64 `json:"corruption"`
	Congestion uint64 `json:"congestion"`
	// Reports are the PATH_REPORTs the engine made; Sent those written to the socket,
	// SendErrors those the socket refused.
	Reports    uint64 `json:"reports"`
	Sent       uint64 `json:"sent"`
	SendErrors uint64 `json:"send_errors"`
	// The engine's own limits: reports whose PSN lists were cut, reports delayed by the
	// per-flow and per-port limits, drops not reported because too many flows had one pending.
	Truncated     uint64 `json:"truncated"`
	DeferredFlow  uint64 `json:"deferred_flow"`
	DeferredPort  uint64 `json:"deferred_port"`
	FlowsOverflow uint64 `json:"flows_overflow"`
	// HoldS is the hold (Options.ReportHold) in seconds; HeldOverflow the drops not reported
	// because too many were held.
	HoldS        float64 `json:"hold_s"`
	HeldOverflow uint64  `json:"held_overflow"`
	// Rejected are the PATH_REPORTs the CSFs rejected (not from a configured reporter, or for
	// no flow of theirs), PSNs the dropped PSNs named in those they accepted.
	Rejected uint64 `json:"rejected"`
	PSNs     uint64 `json:"psns"`
	// Unclaimed are the reports sent that no CSF took or rejected: for flows no CSF protects,
	// as the ACK direction of WRITEs and SENDs, whose packets are no CREM sources (the gateway
	// counts them as CREM messages for no flow), and any still in flight when the run ended.
	Unclaimed uint64 `json:"unclaimed"`
}

// pathReporter is the path's reporter node (PATH_REPORT method 3, node-local drops): the
// engine, its socket, and the goroutine that owns the engine's deadline. The path's two
// directions hand it drops and queueing delays from their own goroutines; the mutex makes
// the engine, which is not safe for concurrent use, have one owner at a time.
type pathReporter struct {
	start time.Time // the path's origin of time
	sock  *net.UDPConn
	self  netip.AddrPort // sock's address

	mu  sync.Mutex
	eng *reporter.Reporter
	// hold delays each drop before the engine hears of it (held, oldest first; at most
	// maxHeld, the rest counted in heldOverflow): see Options.ReportHold.
	hold         time.Duration
	held         []heldDrop
	heldOverflow uint64

	kick   chan struct{} // a drop: the deadline may have moved
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
	final  ReporterRun

	corruption, congestion atomic.Uint64
	sent, sendErrors       atomic.Uint64
}

// heldDrop is a drop waiting out the hold.
type heldDrop struct {
	due   time.Duration
	key   reporter.FlowKey
	port  int
	psn   psn.PSN
	cause wire.Cause
}

// maxHeld bounds the drops held at once: a hold of a block span or two at the lab's rates
// holds a few hundred at a loss of 10 percent.
const maxHeld = 1 << 16

// newPathReporter binds the reporter's socket on addrReporter and starts its engine for the
// CREM port; hold delays each drop before the engine hears of it.
func newPathReporter(port int, start time.Time, hold time.Duration) (*pathReporter, error) {
	eng, err := reporter.New(reporter.Config{NodeID: reporterNodeID, Port: uint16(port)})
	if err != nil {
		return nil, fmt.Errorf("lab: reporter: %w", err)
	}
	sock, err := bindUDP(netip.AddrPortFrom(addrReporter, 0))
	if err != nil {
		return nil, fmt.Errorf("lab: reporter socket on %v: %w", addrReporter, err)
	}
	r := &pathReporter{start: start, sock: sock, self: sock.LocalAddr().(*net.UDPAddr).AddrPort(), eng: eng, hold: max(hold, 0), kick: make(chan struct{}, 1), stop: make(chan struct{})}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.loop() }()
	return r, nil
}

// addr is the reporter's socket address.
func (r *pathReporter) addr() netip.AddrPort { return r.self }

// drop tells the reporter that direction port dropped a RoCEv2 datagram of destination QP qp
// with PSN p, sent from from to to, for cause.
func (r *pathReporter) drop(now time.Duration, port int, from, to netip.AddrPort, qp uint32, p psn.PSN, cause wire.Cause) {
	key := reporter.FlowKey{Src: from.Addr(), Dst: to.Addr(), FlowLabel: qp}
	if cause == wire.CauseCongestion {
		r.congestion.Add(1)
	} else {
		r.corruption.Add(1)
	}
	r.mu.Lock()
	switch {
	case r.hold == 0:
		r.eng.Drop(now, key, port, p, cause)
	case len(r.held) >= maxHeld:
		r.heldOverflow++
	default:
		r.held = append(r.held, heldDrop{due: now + r.hold, key: key, port: port, psn: p, cause: cause})
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// queueDelay tells the reporter the queueing delay of direction port now.
func (r *pathReporter) queueDelay(now time.Duration, port int, d time.Duration) {
	r.mu.Lock()
	r.eng.QueueDelay(now, port, d)
	r.mu.Unlock()
}

// loop ticks the engine at its deadlines and sends what it makes, outside the lock.
func (r *pathReporter) loop() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var batch []reporter.Datagram
	for {
		select {
		case <-r.kick:
		case <-t.C:
		case <-r.stop:
			return
		}
		r.mu.Lock()
		now := time.Since(r.start)
		n := 0
		for ; n < len(r.held) && r.held[n].due <= now; n++ {
			h := &r.held[n]
			// The engine hears of the drop when it happened plus the hold: its aggregation and
			// limits run from there.
			r.eng.Drop(h.due, h.key, h.port, h.psn, h.cause)
		}
		r.held = append(r.held[:0], r.held[n:]...)
		r.eng.Tick(now)
		batch = batch[:0]
		r.eng.Drain(func(d reporter.Datagram) { batch = append(batch, d) })
		next, ok := r.eng.NextDeadline()
		if len(r.held) > 0 && (!ok || r.held[0].due < next) {
			next, ok = r.held[0].due, true
		}
		r.mu.Unlock()
		for _, d := range batch {
			if _, err := r.sock.WriteToUDPAddrPort(d.Payload, d.To); err != nil {
				r.sendErrors.Add(1)
			} else {
				r.sent.Add(1)
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		if ok {
			t.Reset(max(next-time.Since(r.start), 0))
		} else {
			t.Reset(time.Hour)
		}
	}
}

// close stops the reporter (what is still pending is not sent) and returns its figures; again,
// the same figures.
func (r *pathReporter) close() ReporterRun {
	r.closed.Do(func() {
		close(r.stop)
		r.wg.Wait()
		r.sock.Close()
		r.final = r.figures()
	})
	return r.final
}

func (r *pathReporter) figures() ReporterRun {
	r.mu.Lock()
	st, held := r.eng.Stats(), r.heldOverflow
	r.mu.Unlock()
	return ReporterRun{Address: r.addr().String(), Drops: st.Drops, Corruption: r.corruption.Load(), Congestion: r.congestion.Load(),
		Reports: st.Reports, Sent: r.sent.Load(), SendErrors: r.sendErrors.Load(), Truncated: st.Truncated,
		DeferredFlow: st.DeferredFlow, DeferredPort: st.DeferredPort, FlowsOverflow: st.FlowsOverflow,
		HoldS: r.hold.Seconds(), HeldOverflow: held}
}
