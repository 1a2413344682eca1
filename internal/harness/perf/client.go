package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
)

// Run is the client: it connects opts.QPs queue pairs to opts.Server, runs the iterations on
// each over host and returns the result, per QP and in total. The error is nil only when every
// message of every QP completed and was verified. With opts.AllSizes it runs each size in turn
// (Result.Rows).
func Run(ctx context.Context, opts Options, host *udp.Host) (Result, error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if opts.AllSizes {
		return runSizes(ctx, opts, host)
	}
	return runOne(ctx, opts, host)
}

// settleTime bounds the wait for a data socket's receive queue to empty before the counts of a
// run are taken.
const settleTime = 250 * time.Millisecond

// pingPongStall is how long a ping-pong waits for an answer.
const pingPongStall = 20 * time.Second

// runOne runs one size.
func runOne(ctx context.Context, opts Options, host *udp.Host) (Result, error) {
	res := Result{Op: opts.Op, Mode: opts.Mode.String(), Size: opts.Size, Iterations: opts.Iters * opts.QPs,
		Bytes: int64(opts.Size) * int64(opts.Iters) * int64(opts.QPs), MTU: opts.MTU, Rate: opts.Rate,
		Loss: opts.Loss.String(), DelayMs: float64(opts.Delay) / 1e6, QPs: opts.QPs,
		DurationSeconds: opts.Duration.Seconds(), Bidirectional: opts.Bidirectional, RateDefault: opts.rateDefault}
	res.timers(&opts)
	if opts.Via.IsValid() {
		res.Via = opts.Via.String()
	}
	sa, err := net.ResolveUDPAddr("udp", opts.Server)
	if err != nil {
		return res, fmt.Errorf("perf: server %q: %w", opts.Server, err)
	}
	var laddr *net.UDPAddr
	if opts.Bind.IsValid() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(opts.Bind, 0))
	}
	setup, err := net.DialUDP("udp", laddr, sa)
	if err != nil {
		return res, fmt.Errorf("perf: setup: %w", err)
	}
	defer setup.Close()
	local := setup.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	server := sa.AddrPort().Addr().Unmap()
	k0, kok := kernelDrops(host.LocalAddr().Port())
	s0 := host.Socket()

	// One setup exchange per QP, each its own session at the server.
	base := opts.Seed*0x9e3779b97f4a7c15 ^ uint64(time.Now().UnixNano())
	qpn0 := uint32(0x800 + base%0x700)
	runners := make([]*runner, opts.QPs)
	all := make(chan struct{}, opts.QPs)
	for q := range opts.QPs {
		r, err := connect(ctx, &opts, host, setup, local, server, q, base+uint64(q), qpn0+uint32(q), all)
		if err != nil {
			for _, o := range runners[:q] {
				host.Remove(o.conn)
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				res.Interrupted = true // before the first iteration: nothing ran
				return res, ErrInterrupted
			}
			return res, fmt.Errorf("perf: QP %d: %w", q, err)
		}
		runners[q] = r
	}
	defer func() {
		for _, r := range runners {
			host.Remove(r.conn)
		}
	}()
	// The server's direction and its answers need the client's memory (GO, R28).
	if opts.Bidirectional || opts.Latency && opts.Op != "read" {
		for q, r := range runners {
			g := rc.SetupMsg{Type: rc.SetupDone, Nonce: r.nonce, App: mustJSON(doneMsg{Go: true, RKey: r.rkey, Addr: r.raddr, Slots: r.rslots})}
			ans, err := exchange(ctx, setup, &g, rc.SetupResult)
			var sr serverResult
			if err == nil {
				err = json.Unmarshal(ans.App, &sr)
			}
			if err == nil && !sr.Started {
				err = fmt.Errorf("perf: the server did not start its direction (%s)", ans.App)
			}
			if err != nil {
				if errors.Is(ctx.Err(), context.Canceled) {
					res.Interrupted = true
					return res, ErrInterrupted
				}
				return res, fmt.Errorf("perf: QP %d: %w", q, err)
			}
		}
	}
	start := time.Now()
	for _, r := range runners {
		r.start = start
		r.conn.Do(func(*rc.QP) { r.fill() })
	}
	// A ping-pong waits on the server's answers, which the client's QP cannot see fail: a QP
	// that has had no answer for pingPongStall gives up.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	progress := make([]int, len(runners))
	still := make([]time.Time, len(runners))
	for left := len(runners); left > 0 && ctx.Err() == nil; {
		select {
		case <-all:
			left--
		case <-ctx.Done():
		case now := <-tick.C:
			if !opts.Latency || opts.Op == "read" {
				continue
			}
			for q, r := range runners {
				r.conn.Do(func(*rc.QP) {
					if r.got != progress[q] || still[q].IsZero() {
						progress[q], still[q] = r.got, now
					} else if now.Sub(still[q]) > pingPongStall {
						r.fail(fmt.Errorf("perf: no answer from the server for %v after %d (its QP may have given up: see its log)",
							pingPongStall, r.got))
					}
				})
			}
		}
	}
	elapsed := time.Since(start)
	// From here the runners' figures are read on this goroutine: a QP cut short (a cancel, the
	// run's timeout) takes no more completions of its own, which the host's read loop would
	// otherwise count, and stamp, while they are read.
	for _, r := range runners {
		r.conn.Do(func(*rc.QP) { r.stopped = true })
	}
	if d, ok := firstRetransmission(runners); ok {
		ms := float64(d) / float64(time.Millisecond)
		res.FirstRetransmissionMs = &ms
	}
	// Cancelled by the caller (not the run's own timeout) before every QP finished: the
	// iterations in flight are cancelled, not lost.
	interrupted := left(runners) && errors.Is(ctx.Err(), context.Canceled)
	if interrupted {
		res.Interrupted = true
		for _, r := range runners {
			r.conn.Do(func(*rc.QP) {
				r.interrupted = true
				res.Cancelled += r.inFlight()
			})
		}
	}
	host.Settle(settleTime) // the packets still queued in the socket are not lost (R30)
	// The server reports what it checked and counted, per QP.
	var firstErr error
	bad := 0
	res.Verified = true
	res.Iterations, res.Bytes = 0, 0
	var fwd, rev Direction
	fwd.From, rev.From, fwd.Verified, rev.Verified = "client", "server", true, true
	var lat []time.Duration
	var st []*stamps
	var lostAll int64             // packets sent into the sockets and never received, both ways
	var serverDrops uint64        // the most any of the server's sessions counted
	serverKnown := !opts.loopback // loopback: the server's socket is this one
	for q, r := range runners {
		qr, sr, err := r.result(ctx, setup, elapsed)
		bad += r.bad + r.rbad + sr.Bad + sr.RevBad
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("perf: QP %d: %w", q, err)
		}
		res.PerQP = append(res.PerQP, qr)
		res.Iterations += qr.Iterations
		res.Bytes += qr.Bytes
		res.Completed += qr.Completed
		res.Verified = res.Verified && qr.Verified
		res.DataPackets += qr.DataPackets
		res.RetransmittedPackets += qr.RetransmittedPackets
		res.TimeoutRetransmissions += qr.TimeoutRetransmissions
		res.Timeouts += qr.Timeouts
		res.AckPackets += qr.AckPackets
		res.NakPackets += qr.NakPackets
		res.DroppedPackets += qr.DroppedPackets
		res.DroppedDataPackets += qr.DroppedDataPackets
		res.SocketLostDataPackets += qr.SocketLostDataPackets
		res.SocketDataPackets += r.socketData
		res.RTTMs = max(res.RTTMs, float64(r.rtt)/1e6)
		res.SocketPackets += r.socketPkts
		lostAll += r.lostPkts
		if !opts.loopback {
			if sr.SocketDrops == nil || sr.Sent == 0 {
				serverKnown = false
			} else {
				serverDrops = max(serverDrops, *sr.SocketDrops)
			}
			res.ServerSocketReceiveBuffer = max(res.ServerSocketReceiveBuffer, sr.SocketBuffer)
		}
		if qr.Error != "" && res.Error == "" {
			res.Error = qr.Error
			if opts.QPs > 1 {
				res.Error = fmt.Sprintf("QP %d: %s", q, qr.Error)
			}
		}
		fwd.Iterations += r.completed
		fwd.Bytes += int64(r.completed) * int64(opts.Size)
		fwd.Seconds = max(fwd.Seconds, qr.Seconds)
		fwd.Verified = fwd.Verified && r.completed == r.target() && r.bad == 0 && sr.Verified
		if opts.Bidirectional {
			rev.Iterations += sr.RevCompleted
			rev.Bytes += int64(sr.RevCompleted) * int64(opts.Size)
			rev.Seconds = max(rev.Seconds, sr.RevSeconds)
			rev.PeakGbps += sr.RevPeakGbps
			rev.Verified = rev.Verified && r.revOK(sr)
		}
		lat = append(lat, r.lat...)
		st = append(st, &r.st)
	}
	res.Seconds = elapsed.Seconds()
	res.Gbps = float64(res.Bytes) * 8 / elapsed.Seconds() / 1e9
	fwd.Gbps = float64(fwd.Bytes) * 8 / max(fwd.Seconds, 1e-9) / 1e9
	fwd.PeakGbps = max(mergedPeak(st, opts.Size), fwd.Gbps)
	fwd.MsgRateMpps = float64(fwd.Iterations) / max(fwd.Seconds, 1e-9) / 1e6
	res.PeakGbps, res.AverageGbps, res.MsgRateMpps = fwd.PeakGbps, res.Gbps, float64(res.Iterations)/elapsed.Seconds()/1e6
	if opts.Bidirectional {
		rev.Gbps = float64(rev.Bytes) * 8 / max(rev.Seconds, 1e-9) / 1e9
		rev.PeakGbps = max(rev.PeakGbps, rev.Gbps)
		rev.MsgRateMpps = float64(rev.Iterations) / max(rev.Seconds, 1e-9) / 1e6
		res.Directions = []Direction{fwd, rev}
		res.Gbps = fwd.Gbps + rev.Gbps
		res.PeakGbps, res.AverageGbps = fwd.PeakGbps+rev.PeakGbps, res.Gbps
		res.MsgRateMpps = fwd.MsgRateMpps + rev.MsgRateMpps
	}
	if opts.Latency {
		res.Latency = latencyOf(lat, opts.Op != "read")
	}
	s1 := host.Socket()
	res.SocketReceiveBuffer, res.SocketBufferForced, res.RmemMax = s1.Read, s1.ReadForced, rmemMax()
	res.socketAsked = s1.Asked
	if s0.DropsKnown && s1.DropsKnown {
		d := int64(s1.Drops - min(s0.Drops, s1.Drops))
		res.KernelSocketDrops = &d
		if opts.loopback || serverKnown {
			res.splitLoss(d, int64(serverDrops), !opts.loopback, lostAll)
		}
	} else if k1, ok := kernelDrops(host.LocalAddr().Port()); ok && kok {
		d := max(k1-k0, 0)
		res.KernelSocketDrops = &d
	}
	res.socketWarning(opts.loopback)
	if !res.Verified || firstErr != nil {
		res.noBandwidth()
	}
	if interrupted && bad == 0 && res.Error == "" {
		// The server's answer to a cut-short QP may not come (its direction still runs):
		// that is the cancel's doing, not a failure.
		res.Verified, res.Error = false, ""
		return res, ErrInterrupted
	}
	if firstErr != nil {
		res.Verified = false
		return res, firstErr
	}
	if res.Error != "" {
		return res, errors.New(res.Error)
	}
	if !res.Verified {
		return res, errors.New("perf: verification failed: " + res.badSummary())
	}
	return res, nil
}

// ErrInterrupted is the error of a run cancelled by its caller's context (not its own
// timeout) before it ended: Result.Interrupted says so, and nothing in it failed.
var ErrInterrupted = errors.New("perf: interrupted")

// left reports whether some QP had not finished.
func left(runners []*runner) bool {
	for _, r := range runners {
		n := false
		r.conn.Do(func(*rc.QP) { n = !r.finished })
		if n {
			return true
		}
	}
	return false
}

// noBandwidth takes the bandwidth figures out of a run that did not verify: they would
// describe messages it did not deliver.
func (r *Result) noBandwidth() {
	r.Gbps, r.PeakGbps, r.AverageGbps, r.MsgRateMpps = 0, 0, 0, 0
	for i := range r.PerQP {
		if !r.PerQP[i].Verified {
			r.PerQP[i].Gbps = 0
		}
	}
	for i := range r.Directions {
		if !r.Directions[i].Verified {
			d := &r.Directions[i]
			d.Gbps, d.PeakGbps, d.MsgRateMpps = 0, 0, 0
		}
	}
}

// badSummary names the QPs that did not verify.
func (r *Result) badSummary() string {
	var b []byte
	for _, q := range r.PerQP {
		if !q.Verified {
			if len(b) > 0 {
				b = append(b, "; "...)
			}
			b = fmt.Appendf(b, "QP %d: %d of %d completed", q.QP, q.Completed, q.Iterations)
			if q.Error != "" {
				b = fmt.Appendf(b, " (%s)", q.Error)
			}
		}
	}
	return string(b)
}

// connect runs the setup exchange of QP q and puts its QP on host; done receives one value when
// the QP has finished (every iteration completed, or an error).
func connect(ctx context.Context, opts *Options, host *udp.Host, setup *net.UDPConn, local, server netip.Addr,
	q int, nonce uint64, qpn uint32, done chan<- struct{}) (*runner, error) {
	seed := qpSeed(opts.Seed, q)
	// A stated RTT goes to the server, whose QP takes it as a sample too; without one the
	// request says 0, and the server's QP starts unsampled, its timers at least the local ACK
	// timeout until its first ACK (R35).
	var stated time.Duration
	if opts.RTT > 0 {
		stated = opts.rtt()
	}
	req := rc.SetupMsg{Type: rc.SetupRequest, Nonce: nonce, QPN: qpn, StartPSN: InitialPSN(opts.Seed, q),
		MTU: opts.MTU, Mode: opts.Mode, TCAETH: opts.Mode == rc.ModeTCAETH, SRNoNAK: opts.SRNoNAK && opts.Mode == rc.ModeSR,
		Rate: qpRate(opts.Rate, opts.QPs), RTT: stated, DataPort: host.LocalAddr().Port(), FlowPort: host.LocalAddr().Port(),
		RequesterAddr: local, ResponderAddr: server,
		App: mustJSON(request{Op: opts.Op, Size: opts.Size, Iters: opts.Iters, Seed: opts.Seed,
			Loss: opts.Loss.String(), DelayNs: int64(opts.Delay + opts.unseenDelay), QPs: opts.QPs, QP: q,
			DurationNs: int64(opts.Duration), Bidir: opts.Bidirectional, Lat: opts.Latency, RetryCount: opts.RetryCount,
			AckTimeoutCode: opts.AckTimeoutCode, ReorderWindowNs: int64(opts.ReorderWindow)})}
	ans, setupRTT, err := exchangeRTT(ctx, setup, &req, rc.SetupAccept)
	if err != nil {
		return nil, err
	}
	var acc accept
	if err := json.Unmarshal(ans.App, &acc); err != nil || acc.Slots <= 0 {
		return nil, fmt.Errorf("perf: accept data %q: %v", ans.App, err)
	}
	if hold := time.Duration(acc.HoldNs); hold > 0 && hold < setupRTT {
		setupRTT -= hold // the server's own time is no part of the path's
	}
	rtt := opts.rttFrom(setupRTT)
	lat, err := rc.LocalAckTimeoutOf(opts.AckTimeoutCode)
	if err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	cfg := rc.Config{QPN: qpn, RemoteQPN: ans.QPN, SendPSN: req.StartPSN, RecvPSN: ans.StartPSN, MTU: opts.MTU,
		Mode: opts.Mode, SRNoNAK: req.SRNoNAK, Rate: req.Rate, RTT: rtt, RTTProvisional: opts.RTT <= 0,
		LocalAckTimeout: lat, MinTimeout: HostMinTimeout, Burst: time.Millisecond,
		RetryCount: opts.RetryCount, NotifyWrites: opts.Bidirectional || opts.Latency, ReorderWindow: opts.ReorderWindow,
		LocalAddr: local, RemoteAddr: server, LocalPort: host.LocalAddr().Port(), RemotePort: ans.FlowPort}
	qp, err := rc.NewQP(cfg)
	if err != nil {
		return nil, err
	}
	r := &runner{opts: opts, q: q, seed: seed, nonce: nonce, acc: acc, qp: qp, done: done, depth: acc.Slots, rtt: rtt}
	if opts.Latency {
		r.depth = 1
		r.sentAt = make([]time.Time, acc.Slots)
	}
	r.bufs = make([][]byte, acc.Slots)
	for j := range r.bufs {
		r.bufs[j] = make([]byte, opts.Size)
	}
	if opts.Bidirectional || opts.Latency && opts.Op != "read" {
		// The memory of the server's direction: its WRITEs land here, its SENDs fill these
		// receive buffers, its READs read the pattern of each slot.
		r.rseed, r.rslots = dirSeed(seed), slots(opts.Size, opts.Iters, opts.QPs)
		r.rmem = make([]byte, r.rslots*opts.Size)
		mr, err := qp.RegisterMR(r.rmem, rc.AccessRemoteWrite|rc.AccessRemoteRead|rc.AccessLocalWrite)
		if err != nil {
			return nil, err
		}
		r.rkey, r.raddr = mr.RKey, mr.Addr
		for j := range r.rslots {
			b := r.rslot(j)
			switch opts.Op {
			case "read":
				pattern(b, r.rseed, j)
			case "send":
				if err := qp.PostRecv(rc.RecvWR{ID: uint64(j), Buf: b}); err != nil {
					return nil, err
				}
			}
		}
	}
	to := netip.AddrPortFrom(server, ans.DataPort)
	if opts.Via.IsValid() {
		to = opts.Via // a relay's listen; the logical header stays local -> server (R36)
	}
	conn, err := host.Add(qp, to, impairment(opts.Loss, opts.Delay+opts.unseenDelay, seed*2+1), r.complete)
	if err != nil {
		return nil, err
	}
	r.conn = conn
	return r, nil
}

// result collects QP q's figures, its own and the server's (asked with DONE).
func (r *runner) result(ctx context.Context, setup *net.UDPConn, elapsed time.Duration) (QPResult, serverResult, error) {
	opts := r.opts
	cfg := r.qp.Config()
	qr := QPResult{QP: r.q, LocalQPN: cfg.QPN, RemoteQPN: cfg.RemoteQPN, InitialPSN: uint32(cfg.SendPSN)}
	var sr serverResult
	done := rc.SetupMsg{Type: rc.SetupDone, Nonce: r.nonce}
	var serr error
	// The server's direction may still run: it answers busy until it is done.
	for {
		r.conn.Do(func(*rc.QP) { done.App = mustJSON(doneMsg{Final: true, Messages: r.completed}) })
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		fin, err := exchange(dctx, setup, &done, rc.SetupResult)
		dcancel()
		if err != nil {
			serr = err
			break
		}
		sr = serverResult{}
		if err := json.Unmarshal(fin.App, &sr); err != nil {
			serr = fmt.Errorf("perf: result data: %w", err)
			break
		}
		if sr.Started {
			continue // a late answer to GO
		}
		if !sr.Busy {
			break
		}
		select {
		case <-ctx.Done():
			serr = errors.New("perf: the server's direction did not finish in time")
		case <-time.After(20 * time.Millisecond):
		}
		if serr != nil {
			break
		}
	}
	var st rc.Stats
	var got, rbad int
	r.conn.Do(func(qp *rc.QP) {
		st = qp.Stats()
		qr.NextPSN = uint32(qp.NextPSN())
		qr.Completed = r.completed
		qr.Iterations = r.target()
		qr.Verified = r.completed == qr.Iterations && r.bad == 0
		if r.err != nil {
			qr.Error = r.err.Error()
		}
		if r.finished {
			elapsed = r.end.Sub(r.start)
		}
		got, rbad = r.got, r.rbad
	})
	qr.Bytes = int64(opts.Size) * int64(qr.Iterations)
	// The PSNs taken lie within a quarter of the space (rc.MaxOutstandingPSNs per window and far
	// fewer per run than 2^24), so a next PSN below the first means the run crossed the wrap.
	qr.Wrapped = qr.NextPSN < qr.InitialPSN
	c := r.conn.Counts()
	qr.Seconds = elapsed.Seconds()
	qr.Gbps = float64(qr.Bytes) * 8 / elapsed.Seconds() / 1e9
	qr.DataPackets, qr.RetransmittedPackets = st.DataPackets, st.RetransmittedPackets
	qr.TimeoutRetransmissions, qr.AckPackets, qr.NakPackets = st.TimeoutRetransmissions, st.AckPackets, st.NAKPackets
	qr.Timeouts = st.Timeouts
	qr.DroppedPackets, qr.DroppedDataPackets = c.Dropped, c.DataDropped
	if qr.Completed < qr.Iterations && qr.Error == "" && !r.interrupted {
		qr.Error = fmt.Sprintf("%d of %d iterations completed in time", qr.Completed, qr.Iterations)
	}
	if serr != nil {
		qr.Verified = false
		return qr, sr, serr
	}
	qr.DataPackets += sr.Data
	qr.RetransmittedPackets += sr.Retx
	qr.TimeoutRetransmissions += sr.Timeout
	qr.Timeouts += sr.Timeouts
	qr.AckPackets += sr.Acks
	qr.NakPackets += sr.Naks
	qr.DroppedPackets += sr.Dropped
	qr.DroppedDataPackets += sr.DataDropped
	qr.Verified = qr.Verified && sr.Verified
	r.socketData = int64(c.DataSent-c.DataDropped) + int64(sr.DataSent-sr.DataDropped)
	r.socketPkts = int64(c.Sent-c.Dropped) + int64(sr.Sent-sr.Dropped)
	r.lostPkts = int64(c.Sent-c.Dropped) - int64(sr.Recv) + int64(sr.Sent-sr.Dropped) - int64(c.Received)
	if sr.Sent == 0 { // a server that does not count every packet: the data packets alone
		r.socketPkts, r.lostPkts = r.socketData, qr.SocketLostDataPackets
	}
	qr.SocketLostDataPackets = int64(c.DataSent-c.DataDropped) - int64(sr.DataRecv) +
		int64(sr.DataSent-sr.DataDropped) - int64(c.DataReceived)
	if !qr.Verified && qr.Error == "" && (!r.interrupted || r.bad > 0 || sr.Bad > 0) {
		qr.Error = fmt.Sprintf("verification failed (client %d bad, server %d checked, %d bad)", r.bad, sr.Messages, sr.Bad)
	}
	if opts.Bidirectional {
		r.got, r.rbad = got, rbad
		if !r.revOK(sr) {
			qr.Verified = false
			if qr.Error == "" && (!r.interrupted || rbad > 0 || sr.RevBad > 0 || sr.RevErr != "") {
				qr.Error = fmt.Sprintf("the server's direction: %d completed, %d landed here, %d bad here, %d bad there %s",
					sr.RevCompleted, got, rbad, sr.RevBad, sr.RevErr)
			}
		}
		qr.Iterations += sr.RevCompleted
		qr.Completed += sr.RevCompleted
		qr.Bytes += int64(opts.Size) * int64(sr.RevCompleted)
	}
	return qr, sr, nil
}

// revOK reports whether the server's direction of a bidirectional run completed and verified:
// every message it completed landed here intact (WRITE, SEND) or matched there (READ).
func (r *runner) revOK(sr serverResult) bool {
	if sr.RevErr != "" || sr.RevBad != 0 || r.rbad != 0 || sr.RevCompleted == 0 {
		return false
	}
	if r.opts.Duration == 0 && sr.RevCompleted != r.opts.Iters {
		return false
	}
	return r.opts.Op == "read" || r.got == sr.RevCompleted
}

// runner posts one QP's iterations as slots free up and checks READ data as it lands; in
// bidirectional and latency runs it also checks what the server's messages bring.
type runner struct {
	opts       *Options
	q          int
	rtt        time.Duration // the QP's initial RTT (R35)
	seed       uint64        // of this QP's data (qpSeed)
	nonce      uint64
	acc        accept
	qp         *rc.QP
	conn       *udp.Conn
	bufs       [][]byte
	depth      int // messages in flight at most: the slots, one in the latency mode
	posted     int
	completed  int
	bad        int
	err        error
	stopping   bool // --duration is over: no more posts
	finished   bool // every iteration completed, or an error: done was told
	start, end time.Time
	done       chan<- struct{}
	st         stamps
	socketData int64
	// interrupted: the caller cancelled the run before this QP finished.
	interrupted bool
	// stopped: the run stopped waiting for this QP's completions (it finished, was cancelled or
	// timed out); later ones are not counted.
	stopped    bool
	socketPkts int64 // packets (data and ACKs) passed to the sockets, both ways
	lostPkts   int64 // of them, never received by the peer's QP

	// The server's direction: its messages land in rmem's rslots slots (rkey, raddr), with
	// the data of rseed; got have landed, rbad of them wrong.
	rmem      []byte
	rslots    int
	rkey      uint32
	raddr     uint64
	rseed     uint64
	got, rbad int
	sentAt    []time.Time     // latency: when each slot's message was posted
	lat       []time.Duration // latency: one sample per iteration (at most maxStamps)
}

func (r *runner) rslot(j int) []byte { return r.rmem[j*r.opts.Size : (j+1)*r.opts.Size] }

// target is how many messages the QP runs: Iters, or those posted in a --duration run.
func (r *runner) target() int {
	if r.opts.Duration > 0 {
		return r.posted
	}
	return r.opts.Iters
}

// pp reports whether the QP waits for the server's answer to each message (latency WRITE and
// SEND).
func (r *runner) pp() bool { return r.opts.Latency && r.opts.Op != "read" }

// inFlight counts the messages posted and not yet done: completed, or for ping-pong answered
// (the next message goes when the answer lands, as perftest's, not waiting for the ACK).
func (r *runner) inFlight() int {
	if r.pp() {
		return r.posted - r.got
	}
	return r.posted - r.completed
}

// fill posts messages while there is room, and tells Run when the QP is done.
func (r *runner) fill() {
	for !r.finished && r.inFlight() < r.depth {
		if r.opts.Duration > 0 && !r.stopping && time.Since(r.start) >= r.opts.Duration {
			r.stopping = true
		}
		if r.stopping || r.opts.Duration == 0 && r.posted >= r.opts.Iters {
			break
		}
		if !r.post() {
			return
		}
	}
	if !r.finished && r.inFlight() == 0 && r.completed == r.posted &&
		(r.stopping || r.opts.Duration == 0 && r.posted >= r.opts.Iters) {
		r.finish()
	}
}

func (r *runner) post() bool {
	i := r.posted
	j := i % r.acc.Slots
	wr := rc.SendWR{ID: uint64(i), Local: r.bufs[j], RKey: r.acc.RKey,
		RemoteAddr: r.acc.Addr + uint64(j*r.opts.Size)}
	switch r.opts.Op {
	case "write":
		wr.Op = rc.OpWrite
		pattern(r.bufs[j], r.seed, i)
	case "send":
		wr.Op = rc.OpSend
		pattern(r.bufs[j], r.seed, i)
	case "read":
		wr.Op = rc.OpRead
		clear(r.bufs[j])
	}
	now := time.Now()
	if err := r.qp.PostSend(wr); err != nil {
		r.fail(err)
		return false
	}
	r.st.post(now.Sub(r.start))
	if r.sentAt != nil {
		r.sentAt[j] = now
	}
	r.posted++
	return true
}

// finish tells Run that this QP is done, once.
func (r *runner) finish() {
	if !r.finished {
		r.finished = true
		r.end = time.Now()
		r.done <- struct{}{}
	}
}

func (r *runner) fail(err error) {
	if r.err == nil && !r.finished {
		r.err = err
		r.finish()
	}
}

// complete runs under the host's lock for each completion.
func (r *runner) complete(c rc.Completion) {
	if c.Kind == rc.KindWritePlaced || c.Kind == rc.KindRecv {
		r.incoming(c)
		return
	}
	if r.err != nil || r.finished || r.stopped {
		return
	}
	if c.Status != rc.StatusSuccess {
		r.fail(fmt.Errorf("perf: iteration %d: %v (%v)", c.ID, c.Status, r.qp.Err()))
		return
	}
	now := time.Now()
	i := int(c.ID)
	j := i % r.acc.Slots
	if r.opts.Op == "read" && !matches(r.bufs[j], r.seed, j) {
		r.bad++
	}
	r.completed++
	r.st.complete(now.Sub(r.start))
	if r.opts.Latency && !r.pp() && len(r.lat) < maxStamps {
		r.lat = append(r.lat, now.Sub(r.sentAt[j]))
	}
	r.fill()
}

// incoming checks a message of the server's: a WRITE placed in rmem or a SEND received.
func (r *runner) incoming(c rc.Completion) {
	if r.rmem == nil {
		return
	}
	now := time.Now()
	i := r.got
	r.got++
	j := i % r.rslots
	if c.Kind == rc.KindRecv {
		j = int(c.ID)
	}
	if c.Status != rc.StatusSuccess || c.Len != r.opts.Size || !matches(r.rslot(j), r.rseed, i) {
		r.rbad++
	}
	if c.Kind == rc.KindRecv {
		if err := r.qp.PostRecv(rc.RecvWR{ID: uint64(j), Buf: r.rslot(j)}); err != nil {
			r.fail(err)
		}
	}
	if r.pp() && !r.finished && r.err == nil {
		// The answer to the message in flight: its round trip.
		if len(r.lat) < maxStamps {
			r.lat = append(r.lat, now.Sub(r.sentAt[i%r.acc.Slots]))
		}
		r.fill()
	}
}

// exchange sends m until an answer of type want (or a REJECT) with its nonce arrives.
func exchange(ctx context.Context, sock *net.UDPConn, m *rc.SetupMsg, want rc.SetupType) (rc.SetupMsg, error) {
	a, _, err := exchangeRTT(ctx, sock, m, want)
	return a, err
}

// exchangeRTT is exchange that also returns the round trip: from the last time m was sent to
// the answer (R35).
func exchangeRTT(ctx context.Context, sock *net.UDPConn, m *rc.SetupMsg, want rc.SetupType) (rc.SetupMsg, time.Duration, error) {
	b, err := m.Append(nil)
	if err != nil {
		return rc.SetupMsg{}, 0, err
	}
	buf := make([]byte, 2048)
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil || attempt > 40 {
			return rc.SetupMsg{}, 0, fmt.Errorf("perf: no answer from the server to setup message %d", m.Type)
		}
		sent := time.Now()
		if _, err := sock.Write(b); err != nil {
			return rc.SetupMsg{}, 0, fmt.Errorf("perf: setup: %w", err)
		}
		sock.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		for {
			n, err := sock.Read(buf)
			if err != nil {
				break // resend
			}
			a, _, err := rc.ParseSetup(buf[:n])
			if err != nil || a.Nonce != m.Nonce {
				continue
			}
			if a.Type == rc.SetupReject {
				return a, 0, fmt.Errorf("perf: server rejected: %s", a.App)
			}
			if a.Type == want {
				return a, time.Since(sent), nil
			}
		}
	}
}

// Loopback runs a server and the client in this process over real UDP sockets on 127.0.0.1,
// sharing one data socket (opts.Port, 0 picks one).
func Loopback(ctx context.Context, opts Options) (Result, error) {
	opts.loopback = true
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	host, err := udp.Listen(fmt.Sprintf("127.0.0.1:%d", opts.Port), udp.Options{Pcap: opts.Pcap, SocketBuffer: opts.SocketBuffer})
	if err != nil {
		return Result{}, err
	}
	setup, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		host.Close()
		return Result{}, fmt.Errorf("perf: setup socket: %w", err)
	}
	// The server outlives a cancel of ctx until Run has asked it for its figures: a run cut
	// short still reports what the server checked.
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan struct{})
	log := opts.ServerLog
	if log == nil {
		log = discard{}
	}
	go func() {
		defer close(served)
		Serve(sctx, setup, host, log)
	}()
	opts.Server = setup.LocalAddr().String()
	res, err := Run(ctx, opts, host)
	stop()
	<-served
	setup.Close()
	if cerr := host.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return res, err
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// firstRetransmission is the time from the first data packet of any client QP to the first
// retransmission of any (host times, exact; false: none).
func firstRetransmission(runners []*runner) (time.Duration, bool) {
	var first, retx time.Duration
	haveData, haveRetx := false, false
	for _, r := range runners {
		c := r.conn.Counts()
		if c.DataSent > 0 && (!haveData || c.FirstDataAt < first) {
			first, haveData = c.FirstDataAt, true
		}
		if c.Retransmitted && (!haveRetx || c.FirstRetransmissionAt < retx) {
			retx, haveRetx = c.FirstRetransmissionAt, true
		}
	}
	if !haveData || !haveRetx {
		return 0, false
	}
	return max(retx-first, 0), true
}
