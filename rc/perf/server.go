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
}

// Serve answers setup requests on setup and runs their QPs on host until ctx ends. Each
// session's data is checked as it is placed; the RESULT answers the client's DONE.
func Serve(ctx context.Context, setup *net.UDPConn, host *udp.Host, log io.Writer) error {
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
				s, err = newSession(host, &m, from, nextQPN)
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
			if s.result == nil {
				var r serverResult
				s.conn.Do(func(qp *rc.QP) {
					r.Messages, r.Bad = s.good, s.bad
					countsInto(&r, qp.Stats(), udp.Counts{})
				})
				c := s.conn.Counts()
				r.Dropped, r.DataDropped = c.Dropped, c.DataDropped
				r.DataSent, r.DataRecv = c.DataSent, c.DataReceived
				want := s.req.Iters
				if s.req.Op == "read" {
					want = 0 // the client checks READ data
				}
				r.Verified = r.Bad == 0 && r.Messages == want
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

func newSession(host *udp.Host, m *rc.SetupMsg, from netip.AddrPort, qpn uint32) (*session, error) {
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
	if req.QPs < 1 || req.QPs > MaxQPs || req.QP < 0 || req.QP >= req.QPs {
		return nil, fmt.Errorf("queue pair %d of %d out of range (at most %d)", req.QP, req.QPs, MaxQPs)
	}
	loss, err := netem.ParseLossSpec(req.Loss)
	if err != nil {
		return nil, err
	}
	s := &session{req: req, size: req.Size, slots: slots(req.Size, req.Iters, req.QPs), seed: qpSeed(req.Seed, req.QP)}
	cfg := rc.Config{QPN: qpn, RemoteQPN: m.QPN, SendPSN: serverPSN(req.Seed, req.QP), RecvPSN: m.StartPSN,
		MTU: m.MTU, Mode: m.Mode, SRNoNAK: m.SRNoNAK, Rate: m.Rate, RTT: m.RTT, Burst: time.Millisecond,
		NotifyWrites: true, LocalAddr: m.ResponderAddr, RemoteAddr: m.RequesterAddr,
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
		App: mustJSON(accept{RKey: mr.RKey, Addr: mr.Addr, Slots: s.slots})}
	if s.reply, err = acc.Append(nil); err != nil {
		return nil, err
	}
	return s, nil
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
	}
}
