package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
)

// session is one client's connection on the server.
type session struct {
	req     request
	seed    uint64 // of this QP's data and impairment (qpSeed)
	conn    *udp.Conn
	mem     []byte
	slots   int
	size    int
	reply   []byte // the cached ACCEPT
	result  []byte // the cached RESULT
	good    int
	bad     int
	writes  int
	recvs   int
	recvBuf [][]byte
	// drops0 is the kernel's drop count of the data socket when the session began.
	drops0     uint64
	dropsKnown bool
	// rev is the server's own direction (bidirectional runs) or its answers (latency WRITE and
	// SEND), from the client's GO.
	rev *pusher
}

// pusher is the server's direction: it posts the messages of a bidirectional run towards the
// client's memory, or one answer per message of a latency run.
type pusher struct {
	op         string
	size       int
	seed       uint64
	iters      int           // 0 with dur
	dur        time.Duration // --duration
	answer     bool          // latency: one message per client message, posted by check
	rkey       uint32
	addr       uint64
	slots      int // the client's
	bufs       [][]byte
	started    bool
	stopping   bool
	done       bool
	posted     int
	completed  int
	bad        int
	err        error
	start, end time.Time
	st         stamps
}

func (p *pusher) fail(err error) {
	if p.err == nil {
		p.err = err
	}
	p.finish()
}

func (p *pusher) finish() {
	if !p.done {
		p.done, p.end = true, time.Now()
	}
}

// fill posts while the client's slots allow (bidirectional runs).
func (p *pusher) fill(qp *rc.QP) {
	for !p.done && !p.answer && p.posted-p.completed < p.slots {
		if p.dur > 0 && time.Since(p.start) >= p.dur {
			p.stopping = true
		}
		if p.stopping || p.dur == 0 && p.posted >= p.iters {
			break
		}
		if !p.post(qp) {
			return
		}
	}
	if !p.done && !p.answer && p.posted == p.completed && (p.stopping || p.dur == 0 && p.posted >= p.iters) {
		p.finish()
	}
}

func (p *pusher) post(qp *rc.QP) bool {
	i := p.posted
	j := i % p.slots
	b := p.bufs[j%len(p.bufs)]
	wr := rc.SendWR{ID: uint64(i), Local: b, RKey: p.rkey, RemoteAddr: p.addr + uint64(j*p.size)}
	switch p.op {
	case "write":
		wr.Op = rc.OpWrite
		pattern(b, p.seed, i)
	case "send":
		wr.Op = rc.OpSend
		pattern(b, p.seed, i)
	case "read":
		wr.Op = rc.OpRead
		clear(b)
	}
	now := time.Now()
	if err := qp.PostSend(wr); err != nil {
		p.fail(err)
		return false
	}
	p.st.post(now.Sub(p.start))
	p.posted++
	return true
}

// complete takes one of the server's own completions.
func (p *pusher) complete(qp *rc.QP, c rc.Completion) {
	if p.done && !p.answer {
		return
	}
	if c.Status != rc.StatusSuccess {
		p.fail(fmt.Errorf("server's message %d: %v (%v)", c.ID, c.Status, qp.Err()))
		return
	}
	i := int(c.ID)
	j := i % p.slots
	if p.op == "read" && !matches(p.bufs[j%len(p.bufs)], p.seed, j) {
		p.bad++
	}
	p.completed++
	p.st.complete(time.Since(p.start))
	p.fill(qp)
}

// Serve answers setup requests on setup and runs their QPs on host until ctx ends. Each
// session's data is checked as it is placed; the RESULT answers the client's DONE.
func Serve(ctx context.Context, setup *net.UDPConn, host *udp.Host, log io.Writer) error {
	return ServeWith(ctx, setup, host, ServeOptions{Log: log})
}

// ServeOptions are the server's options beyond its sockets.
type ServeOptions struct {
	// Log receives a line per session and per error (nil: discarded).
	Log io.Writer
	// Via, when valid, is where every session's RoCEv2 datagrams go instead of the client's
	// data address: a relay-mode gateway's relay.listen (R36). The logical header stays the
	// endpoints'.
	Via netip.AddrPort
}

// ServeWith is Serve with options.
func ServeWith(ctx context.Context, setup *net.UDPConn, host *udp.Host, o ServeOptions) error {
	log := o.Log
	if log == nil {
		log = discard{}
	}
	var mu sync.Mutex
	sessions := map[uint64]*session{}
	linger := map[uint64]*time.Timer{} // the finished sessions' removals, stopped when Serve returns
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, t := range linger {
			t.Stop()
		}
	}()
	nextQPN := uint32(0x1000)
	stop := context.AfterFunc(ctx, func() { setup.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 2048)
	for {
		n, from, err := setup.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			continue
		}
		m, _, err := rc.ParseSetup(buf[:n])
		if err != nil {
			fmt.Fprintf(log, "perf serve: %v: %v\n", from, err)
			continue
		}
		mu.Lock()
		s := sessions[m.Nonce]
		mu.Unlock()
		switch m.Type {
		case rc.SetupRequest:
			if s == nil {
				nextQPN++
				s, err = newSession(host, &m, from, nextQPN, o.Via)
				if err != nil {
					fmt.Fprintf(log, "perf serve: %v: %v\n", from, err)
					rej := rc.SetupMsg{Type: rc.SetupReject, Nonce: m.Nonce, App: []byte(trim(err.Error()))}
					b, _ := rej.Append(nil)
					setup.WriteToUDPAddrPort(b, from)
					continue
				}
				mu.Lock()
				sessions[m.Nonce] = s
				mu.Unlock()
				fmt.Fprintf(log, "perf serve: %v: %s of %d x %d octets, mode %v, QP %d of %d\n", from, s.req.Op, s.req.Iters, s.req.Size, m.Mode, s.req.QP+1, s.req.QPs)
			}
			setup.WriteToUDPAddrPort(s.reply, from)
		case rc.SetupDone:
			if s == nil {
				continue
			}
			var dm doneMsg
			if len(m.App) > 0 && json.Unmarshal(m.App, &dm) != nil {
				continue
			}
			if dm.Go {
				var err error
				s.conn.Do(func(qp *rc.QP) { err = s.goRev(qp, dm) })
				a := serverResult{Started: err == nil}
				if err != nil {
					a.RevErr = err.Error()
				}
				res := rc.SetupMsg{Type: rc.SetupResult, Nonce: m.Nonce, App: mustJSON(a)}
				b, _ := res.Append(nil)
				setup.WriteToUDPAddrPort(b, from)
				continue
			}
			if s.result == nil {
				var r serverResult
				busy := false
				s.conn.Do(func(*rc.QP) { busy = s.rev != nil && !s.rev.answer && s.rev.started && !s.rev.done })
				if !busy {
					// What the socket still holds is not lost: count it in first (R30).
					host.Settle(settleTime)
				}
				s.conn.Do(func(qp *rc.QP) {
					if p := s.rev; p != nil && !p.answer && p.started && !p.done {
						busy = true
						return
					}
					r.Messages, r.Bad = s.good, s.bad
					countsInto(&r, qp.Stats(), udp.Counts{})
					if p := s.rev; p != nil && !p.answer {
						r.RevCompleted, r.RevBad = p.completed, p.bad
						r.RevSeconds = p.end.Sub(p.start).Seconds()
						r.RevPeakGbps = mergedPeak([]*stamps{&p.st}, p.size)
						if p.err != nil {
							r.RevErr = trim(p.err.Error())
						}
					}
				})
				if busy {
					b, _ := (&rc.SetupMsg{Type: rc.SetupResult, Nonce: m.Nonce, App: mustJSON(serverResult{Busy: true})}).Append(nil)
					setup.WriteToUDPAddrPort(b, from)
					continue
				}
				c := s.conn.Counts()
				r.Dropped, r.DataDropped = c.Dropped, c.DataDropped
				r.DataSent, r.DataRecv = c.DataSent, c.DataReceived
				r.Sent, r.Recv = c.Sent, c.Received
				if k := host.Socket(); k.DropsKnown && s.dropsKnown {
					d := k.Drops - min(s.drops0, k.Drops)
					r.SocketDrops, r.SocketBuffer = &d, k.Read
				}
				want := s.req.Iters
				if s.req.DurationNs > 0 {
					want = dm.Messages // a run of --duration: as many as the client sent
				}
				if s.req.Op == "read" {
					want = 0 // the client checks READ data
				}
				r.Verified = r.Bad == 0 && r.Messages == want
				r.Final = true
				res := rc.SetupMsg{Type: rc.SetupResult, Nonce: m.Nonce, App: mustJSON(r)}
				s.result, _ = res.Append(nil)
				fmt.Fprintf(log, "perf serve: %v: done, %d messages checked, %d bad\n", from, r.Messages, r.Bad)
				// The QP stays a while for the client's last retransmissions, then goes.
				mu.Lock()
				linger[m.Nonce] = time.AfterFunc(5*time.Second, func() {
					host.Remove(s.conn)
					mu.Lock()
					delete(sessions, m.Nonce)
					delete(linger, m.Nonce)
					mu.Unlock()
				})
				mu.Unlock()
			}
			setup.WriteToUDPAddrPort(s.result, from)
		}
	}
}

func trim(s string) string {
	if len(s) > rc.SetupMaxApp {
		return s[:rc.SetupMaxApp]
	}
	return s
}

func newSession(host *udp.Host, m *rc.SetupMsg, from netip.AddrPort, qpn uint32, via netip.AddrPort) (*session, error) {
	begin := time.Now()
	var req request
	if err := json.Unmarshal(m.App, &req); err != nil {
		return nil, fmt.Errorf("request data: %w", err)
	}
	if req.Size <= 0 || req.Size > 1<<30 || req.Iters <= 0 {
		return nil, fmt.Errorf("size %d x %d iterations out of range", req.Size, req.Iters)
	}
	if req.QPs == 0 {
		req.QPs = 1
	}
	if req.DurationNs < 0 || req.Bidir && req.Lat || req.RetryCount < 0 || req.RetryCount > 1000 {
		return nil, fmt.Errorf("duration %d ns, bidirectional %v, latency %v, retry count %d: not a run",
			req.DurationNs, req.Bidir, req.Lat, req.RetryCount)
	}
	if req.ReorderWindowNs < 0 || req.ReorderWindowNs > int64(time.Second) {
		return nil, fmt.Errorf("reorder window %d ns: want 0 to 1 s", req.ReorderWindowNs)
	}
	if req.QPs < 1 || req.QPs > MaxQPs || req.QP < 0 || req.QP >= req.QPs {
		return nil, fmt.Errorf("queue pair %d of %d out of range (at most %d)", req.QP, req.QPs, MaxQPs)
	}
	loss, err := netem.ParseLossSpec(req.Loss)
	if err != nil {
		return nil, err
	}
	code := req.AckTimeoutCode
	if code == 0 {
		code = rc.DefaultLocalAckTimeoutCode
	}
	lat, err := rc.LocalAckTimeoutOf(code)
	if err != nil {
		return nil, err
	}
	s := &session{req: req, size: req.Size, slots: slots(req.Size, req.Iters, req.QPs), seed: qpSeed(req.Seed, req.QP)}
	k := host.Socket()
	s.drops0, s.dropsKnown = k.Drops, k.DropsKnown
	// The client's stated RTT is a sample for this QP too; 0 (the client measures its own at
	// setup) leaves it unsampled, its timers at least the local ACK timeout until its first
	// ACK (R35).
	cfg := rc.Config{QPN: qpn, RemoteQPN: m.QPN, SendPSN: serverPSN(req.Seed, req.QP), RecvPSN: m.StartPSN,
		MTU: m.MTU, Mode: m.Mode, SRNoNAK: m.SRNoNAK, Rate: m.Rate, RTT: m.RTT, LocalAckTimeout: lat, MinTimeout: HostMinTimeout, Burst: time.Millisecond,
		NotifyWrites: true, RetryCount: req.RetryCount, ReorderWindow: time.Duration(req.ReorderWindowNs), LocalAddr: m.ResponderAddr, RemoteAddr: m.RequesterAddr,
		LocalPort: host.LocalAddr().Port(), RemotePort: m.FlowPort}
	qp, err := rc.NewQP(cfg)
	if err != nil {
		return nil, err
	}
	s.mem = make([]byte, s.size*s.slots)
	mr, err := qp.RegisterMR(s.mem, rc.AccessRemoteWrite|rc.AccessRemoteRead|rc.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	if req.Op == "read" {
		for j := range s.slots {
			pattern(s.mem[j*s.size:(j+1)*s.size], s.seed, j)
		}
	}
	if req.Op == "send" {
		for j := range s.slots {
			s.recvBuf = append(s.recvBuf, s.mem[j*s.size:(j+1)*s.size])
			qp.PostRecv(rc.RecvWR{ID: uint64(j), Buf: s.recvBuf[j]})
		}
	}
	peer := netip.AddrPortFrom(from.Addr(), m.DataPort)
	if via.IsValid() {
		peer = via
	}
	conn, err := host.Add(qp, peer, impairment(loss, time.Duration(req.DelayNs), s.seed*2+2),
		func(c rc.Completion) { s.check(qp, c) })
	if err != nil {
		return nil, err
	}
	s.conn = conn
	acc := rc.SetupMsg{Type: rc.SetupAccept, Nonce: m.Nonce, QPN: qpn, StartPSN: cfg.SendPSN, MTU: m.MTU,
		Mode: m.Mode, TCAETH: m.TCAETH, SRNoNAK: m.SRNoNAK, Rate: m.Rate, RTT: m.RTT,
		DataPort: host.LocalAddr().Port(), FlowPort: host.LocalAddr().Port(),
		RequesterAddr: m.RequesterAddr, ResponderAddr: m.ResponderAddr,
		App: mustJSON(accept{RKey: mr.RKey, Addr: mr.Addr, Slots: s.slots, HoldNs: int64(time.Since(begin))})}
	if s.reply, err = acc.Append(nil); err != nil {
		return nil, err
	}
	return s, nil
}

// goRev takes the client's GO: its memory, and the start of the server's direction
// (bidirectional) or of its answers (latency). A repeated GO changes nothing.
func (s *session) goRev(qp *rc.QP, dm doneMsg) error {
	if !s.req.Bidir && !(s.req.Lat && s.req.Op != "read") {
		return fmt.Errorf("GO for a run of one direction")
	}
	if s.rev != nil {
		return nil
	}
	if dm.Slots <= 0 || dm.Slots > 64 {
		return fmt.Errorf("client memory of %d slots", dm.Slots)
	}
	p := &pusher{op: s.req.Op, size: s.size, seed: dirSeed(s.seed), iters: s.req.Iters, dur: time.Duration(s.req.DurationNs),
		answer: s.req.Lat, rkey: dm.RKey, addr: dm.Addr, slots: dm.Slots, started: true, start: time.Now()}
	n := dm.Slots
	if p.answer {
		n = 1
	}
	p.bufs = make([][]byte, n)
	for j := range p.bufs {
		p.bufs[j] = make([]byte, s.size)
	}
	s.rev = p
	p.fill(qp)
	return nil
}

// check verifies a WRITE or SEND as soon as it is placed, before the client can reuse its
// slot, and gives a SEND's buffer back.
func (s *session) check(qp *rc.QP, c rc.Completion) {
	switch c.Kind {
	case rc.KindWritePlaced:
		i := s.writes
		s.writes++
		j := i % s.slots
		if c.Len == s.size && matches(s.mem[j*s.size:(j+1)*s.size], s.seed, i) {
			s.good++
		} else {
			s.bad++
		}
	case rc.KindRecv:
		i := s.recvs
		s.recvs++
		j := int(c.ID)
		if c.Status == rc.StatusSuccess && c.Len == s.size && matches(s.recvBuf[j][:c.Len], s.seed, i) {
			s.good++
		} else {
			s.bad++
		}
		qp.PostRecv(rc.RecvWR{ID: c.ID, Buf: s.recvBuf[j]})
	case rc.KindSend:
		if s.rev != nil {
			s.rev.complete(qp, c)
		}
		return
	default:
		return
	}
	// Latency: the answer to this message, as soon as it is checked.
	if p := s.rev; p != nil && p.answer && p.err == nil {
		p.post(qp)
	}
}
