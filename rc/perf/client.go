package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
)

// Run is the client: it connects to opts.Server, runs the iterations over host and returns
// the result. The error is nil only when every message completed and was verified.
func Run(ctx context.Context, opts Options, host *udp.Host) (Result, error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	res := Result{Op: opts.Op, Mode: opts.Mode.String(), Size: opts.Size, Iterations: opts.Iters,
		Bytes: int64(opts.Size) * int64(opts.Iters), MTU: opts.MTU, Rate: opts.Rate, Loss: opts.Loss.String(),
		DelayMs: float64(opts.Delay) / 1e6}
	if opts.Mode == rc.ModeSR && opts.SRNoNAK {
		res.Mode = "sr"
	}
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

	nonce := opts.Seed*0x9e3779b97f4a7c15 ^ uint64(time.Now().UnixNano())
	qpn := uint32(0x800 + nonce%0x700)
	req := rc.SetupMsg{Type: rc.SetupRequest, Nonce: nonce, QPN: qpn, StartPSN: psn.Of(uint32(nonce >> 32)),
		MTU: opts.MTU, Mode: opts.Mode, TCAETH: opts.Mode == rc.ModeTCAETH, SRNoNAK: opts.SRNoNAK && opts.Mode == rc.ModeSR,
		Rate: opts.Rate, RTT: opts.RTT, DataPort: host.LocalAddr().Port(), FlowPort: host.LocalAddr().Port(),
		RequesterAddr: local, ResponderAddr: server,
		App: mustJSON(request{Op: opts.Op, Size: opts.Size, Iters: opts.Iters, Seed: opts.Seed,
			Loss: opts.Loss.String(), DelayNs: int64(opts.Delay)})}
	ans, err := exchange(ctx, setup, &req, rc.SetupAccept)
	if err != nil {
		return res, err
	}
	var acc accept
	if err := json.Unmarshal(ans.App, &acc); err != nil || acc.Slots <= 0 {
		return res, fmt.Errorf("perf: accept data %q: %v", ans.App, err)
	}
	cfg := rc.Config{QPN: qpn, RemoteQPN: ans.QPN, SendPSN: req.StartPSN, RecvPSN: ans.StartPSN, MTU: opts.MTU,
		Mode: opts.Mode, SRNoNAK: req.SRNoNAK, Rate: opts.Rate, RTT: opts.RTT, Burst: time.Millisecond,
		RetryCount: opts.RetryCount,
		LocalAddr:  local, RemoteAddr: server, LocalPort: host.LocalAddr().Port(), RemotePort: ans.FlowPort}
	qp, err := rc.NewQP(cfg)
	if err != nil {
		return res, err
	}
	r := &runner{opts: &opts, acc: acc, qp: qp, done: make(chan struct{})}
	r.bufs = make([][]byte, acc.Slots)
	for j := range r.bufs {
		r.bufs[j] = make([]byte, opts.Size)
	}
	conn, err := host.Add(qp, netip.AddrPortFrom(server, ans.DataPort), impairment(opts.Loss, opts.Delay, opts.Seed*2+1), r.complete)
	if err != nil {
		return res, err
	}
	defer host.Remove(conn)
	start := time.Now()
	conn.Do(func(qp *rc.QP) {
		for range acc.Slots {
			r.post()
		}
	})
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	var st rc.Stats
	conn.Do(func(qp *rc.QP) {
		st = qp.Stats()
		res.Completed, res.Verified = r.completed, r.completed == opts.Iters && r.bad == 0
		if r.err != nil {
			res.Error = r.err.Error()
		}
	})
	c := conn.Counts()
	res.Seconds = elapsed.Seconds()
	res.Gbps = float64(res.Bytes) * 8 / elapsed.Seconds() / 1e9
	res.DataPackets, res.RetransmittedPackets = st.DataPackets, st.RetransmittedPackets
	res.TimeoutRetransmissions, res.AckPackets, res.NakPackets = st.TimeoutRetransmissions, st.AckPackets, st.NAKPackets
	res.DroppedPackets, res.DroppedDataPackets = c.Dropped, c.DataDropped
	if res.Completed < opts.Iters && res.Error == "" {
		res.Error = fmt.Sprintf("%d of %d iterations completed in time", res.Completed, opts.Iters)
	}
	// The server reports what it checked and counted.
	done := rc.SetupMsg{Type: rc.SetupDone, Nonce: nonce}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	fin, err := exchange(dctx, setup, &done, rc.SetupResult)
	if err != nil {
		res.Verified = false
		return res, err
	}
	var sr serverResult
	if err := json.Unmarshal(fin.App, &sr); err != nil {
		res.Verified = false
		return res, fmt.Errorf("perf: result data: %w", err)
	}
	res.DataPackets += sr.Data
	res.RetransmittedPackets += sr.Retx
	res.TimeoutRetransmissions += sr.Timeout
	res.AckPackets += sr.Acks
	res.NakPackets += sr.Naks
	res.DroppedPackets += sr.Dropped
	res.DroppedDataPackets += sr.DataDropped
	res.Verified = res.Verified && sr.Verified
	res.SocketLostDataPackets = int64(c.DataSent-c.DataDropped) - int64(sr.DataRecv) +
		int64(sr.DataSent-sr.DataDropped) - int64(c.DataReceived)
	if res.Error != "" {
		return res, errors.New(res.Error)
	}
	if !res.Verified {
		return res, fmt.Errorf("perf: verification failed (client %d bad, server %d checked, %d bad)", r.bad, sr.Messages, sr.Bad)
	}
	return res, nil
}

// runner posts iterations as slots free up and checks READ data as it lands.
type runner struct {
	opts      *Options
	acc       accept
	qp        *rc.QP
	bufs      [][]byte
	posted    int
	completed int
	bad       int
	err       error
	finished  bool
	done      chan struct{}
}

func (r *runner) post() {
	if r.posted >= r.opts.Iters {
		return
	}
	i := r.posted
	j := i % r.acc.Slots
	wr := rc.SendWR{ID: uint64(i), Local: r.bufs[j], RKey: r.acc.RKey,
		RemoteAddr: r.acc.Addr + uint64(j*r.opts.Size)}
	switch r.opts.Op {
	case "write":
		wr.Op = rc.OpWrite
		pattern(r.bufs[j], r.opts.Seed, i)
	case "send":
		wr.Op = rc.OpSend
		pattern(r.bufs[j], r.opts.Seed, i)
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

func (r *runner) fail(err error) {
	if r.err == nil && !r.finished {
		r.err = err
		close(r.done)
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
	if r.opts.Op == "read" && !matches(r.bufs[j], r.opts.Seed, j) {
		r.bad++
	}
	r.completed++
	if r.completed == r.opts.Iters {
		r.finished = true
		close(r.done)
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
