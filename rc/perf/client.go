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
// message of every QP completed and was verified.
func Run(ctx context.Context, opts Options, host *udp.Host) (Result, error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	res := Result{Op: opts.Op, Mode: opts.Mode.String(), Size: opts.Size, Iterations: opts.Iters * opts.QPs,
		Bytes: int64(opts.Size) * int64(opts.Iters) * int64(opts.QPs), MTU: opts.MTU, Rate: opts.Rate,
		Loss: opts.Loss.String(), DelayMs: float64(opts.Delay) / 1e6, QPs: opts.QPs}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	sa, err := net.ResolveUDPAddr("udp", opts.Server)
	if err != nil {
		return res, fmt.Errorf("perf: server %q: %w", opts.Server, err)
	}
	setup, err := net.DialUDP("udp", nil, sa)
	if err != nil {
		return res, fmt.Errorf("perf: setup: %w", err)
	}
	defer setup.Close()
	local := setup.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	server := sa.AddrPort().Addr().Unmap()

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
			return res, fmt.Errorf("perf: QP %d: %w", q, err)
		}
		runners[q] = r
	}
	defer func() {
		for _, r := range runners {
			host.Remove(r.conn)
		}
	}()
	start := time.Now()
	for _, r := range runners {
		r.start = start
		r.conn.Do(func(*rc.QP) {
			for range r.acc.Slots {
				r.post()
			}
		})
	}
	for range runners {
		select {
		case <-all:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	elapsed := time.Since(start)
	// The server reports what it checked and counted, per QP.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	var firstErr error
	res.Verified = true
	for q, r := range runners {
		qr, err := r.result(dctx, setup, elapsed)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("perf: QP %d: %w", q, err)
		}
		res.PerQP = append(res.PerQP, qr)
		res.Completed += qr.Completed
		res.Verified = res.Verified && qr.Verified
		res.DataPackets += qr.DataPackets
		res.RetransmittedPackets += qr.RetransmittedPackets
		res.TimeoutRetransmissions += qr.TimeoutRetransmissions
		res.AckPackets += qr.AckPackets
		res.NakPackets += qr.NakPackets
		res.DroppedPackets += qr.DroppedPackets
		res.DroppedDataPackets += qr.DroppedDataPackets
		res.SocketLostDataPackets += qr.SocketLostDataPackets
		if qr.Error != "" && res.Error == "" {
			res.Error = qr.Error
			if opts.QPs > 1 {
				res.Error = fmt.Sprintf("QP %d: %s", q, qr.Error)
			}
		}
	}
	res.Seconds = elapsed.Seconds()
	res.Gbps = float64(res.Bytes) * 8 / elapsed.Seconds() / 1e9
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

// badSummary names the QPs that did not verify.
func (r *Result) badSummary() string {
	var b []byte
	for _, q := range r.PerQP {
		if !q.Verified {
			if len(b) > 0 {
				b = append(b, "; "...)
			}
			b = fmt.Appendf(b, "QP %d: %d of %d completed", q.QP, q.Completed, q.Iterations)
		}
	}
	return string(b)
}

// connect runs the setup exchange of QP q and puts its QP on host; done receives one value when
// the QP has finished (every iteration completed, or an error).
func connect(ctx context.Context, opts *Options, host *udp.Host, setup *net.UDPConn, local, server netip.Addr,
	q int, nonce uint64, qpn uint32, done chan<- struct{}) (*runner, error) {
	seed := qpSeed(opts.Seed, q)
	req := rc.SetupMsg{Type: rc.SetupRequest, Nonce: nonce, QPN: qpn, StartPSN: InitialPSN(opts.Seed, q),
		MTU: opts.MTU, Mode: opts.Mode, TCAETH: opts.Mode == rc.ModeTCAETH, SRNoNAK: opts.SRNoNAK && opts.Mode == rc.ModeSR,
		Rate: qpRate(opts.Rate, opts.QPs), RTT: opts.RTT, DataPort: host.LocalAddr().Port(), FlowPort: host.LocalAddr().Port(),
		RequesterAddr: local, ResponderAddr: server,
		App: mustJSON(request{Op: opts.Op, Size: opts.Size, Iters: opts.Iters, Seed: opts.Seed,
			Loss: opts.Loss.String(), DelayNs: int64(opts.Delay), QPs: opts.QPs, QP: q})}
	ans, err := exchange(ctx, setup, &req, rc.SetupAccept)
	if err != nil {
		return nil, err
	}
	var acc accept
	if err := json.Unmarshal(ans.App, &acc); err != nil || acc.Slots <= 0 {
		return nil, fmt.Errorf("perf: accept data %q: %v", ans.App, err)
	}
	cfg := rc.Config{QPN: qpn, RemoteQPN: ans.QPN, SendPSN: req.StartPSN, RecvPSN: ans.StartPSN, MTU: opts.MTU,
		Mode: opts.Mode, SRNoNAK: req.SRNoNAK, Rate: req.Rate, RTT: opts.RTT, Burst: time.Millisecond,
		RetryCount: opts.RetryCount,
		LocalAddr:  local, RemoteAddr: server, LocalPort: host.LocalAddr().Port(), RemotePort: ans.FlowPort}
	qp, err := rc.NewQP(cfg)
	if err != nil {
		return nil, err
	}
	r := &runner{opts: opts, q: q, seed: seed, nonce: nonce, acc: acc, qp: qp, done: done}
	r.bufs = make([][]byte, acc.Slots)
	for j := range r.bufs {
		r.bufs[j] = make([]byte, opts.Size)
	}
	conn, err := host.Add(qp, netip.AddrPortFrom(server, ans.DataPort), impairment(opts.Loss, opts.Delay, seed*2+1), r.complete)
	if err != nil {
		return nil, err
	}
	r.conn = conn
	return r, nil
}

// result collects QP q's figures, its own and the server's (asked with DONE).
func (r *runner) result(ctx context.Context, setup *net.UDPConn, elapsed time.Duration) (QPResult, error) {
	opts := r.opts
	cfg := r.qp.Config()
	qr := QPResult{QP: r.q, LocalQPN: cfg.QPN, RemoteQPN: cfg.RemoteQPN, InitialPSN: uint32(cfg.SendPSN),
		Iterations: opts.Iters, Bytes: int64(opts.Size) * int64(opts.Iters)}
	var st rc.Stats
	r.conn.Do(func(qp *rc.QP) {
		st = qp.Stats()
		qr.NextPSN = uint32(qp.NextPSN())
		qr.Completed, qr.Verified = r.completed, r.completed == opts.Iters && r.bad == 0
		if r.err != nil {
			qr.Error = r.err.Error()
		}
		if r.finished {
			elapsed = r.end.Sub(r.start)
		}
	})
	// The PSNs taken lie within a quarter of the space (rc.MaxOutstandingPSNs per window and far
	// fewer per run than 2^24), so a next PSN below the first means the run crossed the wrap.
	qr.Wrapped = qr.NextPSN < qr.InitialPSN
	c := r.conn.Counts()
	qr.Seconds = elapsed.Seconds()
	qr.Gbps = float64(qr.Bytes) * 8 / elapsed.Seconds() / 1e9
	qr.DataPackets, qr.RetransmittedPackets = st.DataPackets, st.RetransmittedPackets
	qr.TimeoutRetransmissions, qr.AckPackets, qr.NakPackets = st.TimeoutRetransmissions, st.AckPackets, st.NAKPackets
	qr.DroppedPackets, qr.DroppedDataPackets = c.Dropped, c.DataDropped
	if qr.Completed < opts.Iters && qr.Error == "" {
		qr.Error = fmt.Sprintf("%d of %d iterations completed in time", qr.Completed, opts.Iters)
	}
	done := rc.SetupMsg{Type: rc.SetupDone, Nonce: r.nonce}
	fin, err := exchange(ctx, setup, &done, rc.SetupResult)
	if err != nil {
		qr.Verified = false
		return qr, err
	}
	var sr serverResult
	if err := json.Unmarshal(fin.App, &sr); err != nil {
		qr.Verified = false
		return qr, fmt.Errorf("perf: result data: %w", err)
	}
	qr.DataPackets += sr.Data
	qr.RetransmittedPackets += sr.Retx
	qr.TimeoutRetransmissions += sr.Timeout
	qr.AckPackets += sr.Acks
	qr.NakPackets += sr.Naks
	qr.DroppedPackets += sr.Dropped
	qr.DroppedDataPackets += sr.DataDropped
	qr.Verified = qr.Verified && sr.Verified
	qr.SocketLostDataPackets = int64(c.DataSent-c.DataDropped) - int64(sr.DataRecv) +
		int64(sr.DataSent-sr.DataDropped) - int64(c.DataReceived)
	if !qr.Verified && qr.Error == "" {
		qr.Error = fmt.Sprintf("verification failed (client %d bad, server %d checked, %d bad)", r.bad, sr.Messages, sr.Bad)
	}
	return qr, nil
}

// runner posts one QP's iterations as slots free up and checks READ data as it lands.
type runner struct {
	opts       *Options
	q          int
	seed       uint64 // of this QP's data (qpSeed)
	nonce      uint64
	acc        accept
	qp         *rc.QP
	conn       *udp.Conn
	bufs       [][]byte
	posted     int
	completed  int
	bad        int
	err        error
	finished   bool // every iteration completed, or an error: done was told
	start, end time.Time
	done       chan<- struct{}
}

func (r *runner) post() {
	if r.posted >= r.opts.Iters || r.finished {
		return
	}
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
	if err := r.qp.PostSend(wr); err != nil {
		r.fail(err)
		return
	}
	r.posted++
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
	if r.err != nil || r.finished {
		return
	}
	if c.Status != rc.StatusSuccess {
		r.fail(fmt.Errorf("perf: iteration %d: %v (%v)", c.ID, c.Status, r.qp.Err()))
		return
	}
	i := int(c.ID)
	j := i % r.acc.Slots
	if r.opts.Op == "read" && !matches(r.bufs[j], r.seed, j) {
		r.bad++
	}
	r.completed++
	if r.completed == r.opts.Iters {
		r.finish()
		return
	}
	r.post()
}

// exchange sends m until an answer of type want (or a REJECT) with its nonce arrives.
func exchange(ctx context.Context, sock *net.UDPConn, m *rc.SetupMsg, want rc.SetupType) (rc.SetupMsg, error) {
	b, err := m.Append(nil)
	if err != nil {
		return rc.SetupMsg{}, err
	}
	buf := make([]byte, 2048)
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil || attempt > 40 {
			return rc.SetupMsg{}, fmt.Errorf("perf: no answer from the server to setup message %d", m.Type)
		}
		if _, err := sock.Write(b); err != nil {
			return rc.SetupMsg{}, fmt.Errorf("perf: setup: %w", err)
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
				return a, fmt.Errorf("perf: server rejected: %s", a.App)
			}
			if a.Type == want {
				return a, nil
			}
		}
	}
}

// Loopback runs a server and the client in this process over real UDP sockets on 127.0.0.1,
// sharing one data socket (opts.Port, 0 picks one).
func Loopback(ctx context.Context, opts Options) (Result, error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	host, err := udp.Listen(fmt.Sprintf("127.0.0.1:%d", opts.Port), udp.Options{Pcap: opts.Pcap})
	if err != nil {
		return Result{}, err
	}
	setup, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		host.Close()
		return Result{}, fmt.Errorf("perf: setup socket: %w", err)
	}
	sctx, stop := context.WithCancel(ctx)
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
