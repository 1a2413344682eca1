package conform

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// rx is one datagram a socket of the runner received.
type rx struct {
	at   time.Time
	from netip.AddrPort
	b    []byte
}

// sock is one of the runner's UDP sockets with its reader: the reader timestamps each datagram
// as it arrives and queues it, never blocking (a full queue drops, counted).
type sock struct {
	name    string
	conn    *net.UDPConn
	addr    netip.AddrPort
	ch      chan rx
	pending []rx // received, not yet taken by a scenario's predicate
	dropped int
	// received counts every datagram the socket read, for the runner's check that the target
	// answers at all.
	received atomic.Int64
	mu       sync.Mutex
	done     chan struct{}
}

const (
	sockQueue   = 8192 // datagrams a reader queues before it drops
	maxPending  = 4096 // datagrams kept that no predicate took yet
	maxCaptured = 48   // datagrams of a scenario kept for its failure report
)

func newSock(name string, c *net.UDPConn) *sock {
	ap := c.LocalAddr().(*net.UDPAddr).AddrPort()
	s := &sock{name: name, conn: c, addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()),
		ch: make(chan rx, sockQueue), done: make(chan struct{})}
	go s.read()
	return s
}

func (s *sock) read() {
	defer close(s.done)
	buf := make([]byte, 65536)
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.received.Add(1)
		r := rx{at: time.Now(), from: netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), b: append([]byte(nil), buf[:n]...)}
		select {
		case s.ch <- r:
		default:
			s.mu.Lock()
			s.dropped++
			s.mu.Unlock()
		}
	}
}

func (s *sock) close() {
	s.conn.Close()
	<-s.done
}

// Harness is what a scenario runs on: the runner's sockets, the target's addresses, deadlines
// and the capture of every datagram for the report. Its methods that find a scenario wrong (or
// not applicable) stop the scenario: fail and skip do not return.
type Harness struct {
	cfg    *Config
	rng    *rand.Rand
	socks  map[string]*sock
	extra  []*sock // the scenario's own sockets, closed at its end
	start  time.Time
	res    *Result
	capt   []Packet
	nextQP func() uint32
}

// stop unwinds a scenario that has its verdict.
type stop struct{}

// fail ends the scenario with FAIL.
func (h *Harness) fail(expected, got, format string, a ...any) {
	h.res.Status, h.res.Reason, h.res.Expected, h.res.Got = Fail, fmt.Sprintf(format, a...), expected, got
	panic(stop{})
}

// skip ends the scenario with SKIP.
func (h *Harness) skip(format string, a ...any) {
	h.res.Status, h.res.Reason = Skip, fmt.Sprintf(format, a...)
	panic(stop{})
}

// note records what the scenario saw.
func (h *Harness) note(format string, a ...any) {
	h.res.Notes = append(h.res.Notes, fmt.Sprintf(format, a...))
}

func (h *Harness) capture(dir, via string, peer netip.AddrPort, at time.Time, b []byte) {
	const maxHex = 96
	x := hex.EncodeToString(b)
	if len(x) > 2*maxHex {
		x = x[:2*maxHex] + fmt.Sprintf("...(%d octets)", len(b))
	}
	h.capt = append(h.capt, Packet{At: at.Sub(h.start), Dir: dir, Via: via, Peer: peer.String(), Hex: x, What: describe(b)})
	if len(h.capt) > 4*maxCaptured {
		h.capt = append(h.capt[:0], h.capt[len(h.capt)-maxCaptured:]...)
	}
}

// describe names a datagram for the capture: a CREM message type with its Flow ID, or the
// RoCEv2 opcode and PSN.
func describe(b []byte) string {
	if len(b) >= wire.HeaderLen && b[0]>>4 == wire.Version && wire.Type(b[0]&0x0f).Known() {
		return fmt.Sprintf("%v/%08x", wire.Type(b[0]&0x0f), uint32(b[4])<<24|uint32(b[5])<<16|uint32(b[6])<<8|uint32(b[7]))
	}
	if len(b) >= roce.BTHLen {
		if bth, _, err := roce.ParseBTH(b); err == nil {
			return fmt.Sprintf("RoCE %#02x psn %d", uint8(bth.OpCode), uint32(bth.PSN))
		}
	}
	return fmt.Sprintf("%d octets", len(b))
}

// sock returns the named socket of the run or the scenario.
func (h *Harness) sock(name string) *sock {
	if s := h.socks[name]; s != nil {
		return s
	}
	for _, s := range h.extra {
		if s.name == name {
			return s
		}
	}
	panic(fmt.Sprintf("conform: no socket %q", name)) // a scenario's own mistake
}

// open binds a socket of the scenario's own on addr (port 0: any), named name.
func (h *Harness) open(name string, addr netip.AddrPort) *sock {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		h.skip("cannot bind a socket on %v for %s: %v", addr, name, err)
	}
	s := newSock(name, c)
	h.extra = append(h.extra, s)
	return s
}

// send sends b from the named socket to to.
func (h *Harness) send(via string, to netip.AddrPort, b []byte) {
	s := h.sock(via)
	h.capture("sent", via, to, time.Now(), b)
	if _, err := s.conn.WriteToUDPAddrPort(b, to); err != nil {
		h.note("send from %s to %v: %v", via, to, err)
	}
}

// sendMsg appends m and sends it.
func (h *Harness) sendMsg(via string, to netip.AddrPort, m wire.Message) []byte {
	b, err := m.Append(nil)
	if err != nil {
		panic(fmt.Sprintf("conform: building %v: %v", m.Type(), err)) // the runner's own message
	}
	h.send(via, to, b)
	return b
}

// take moves what the socket's reader queued into pending, recording it.
func (h *Harness) take(s *sock, r rx) {
	h.capture("recv", s.name, r.from, r.at, r.b)
	if len(s.pending) >= maxPending {
		s.pending = s.pending[1:]
	}
	s.pending = append(s.pending, r)
}

// recv returns the first datagram on the socket that pred accepts, among those pending and
// those arriving until the deadline; false at the deadline.
func (h *Harness) recv(via string, until time.Time, pred func(rx) bool) (rx, bool) {
	s := h.sock(via)
	scanned := 0
	for {
		for ; scanned < len(s.pending); scanned++ {
			if r := s.pending[scanned]; pred(r) {
				s.pending = append(s.pending[:scanned], s.pending[scanned+1:]...)
				return r, true
			}
		}
		wait := time.Until(until)
		if wait <= 0 {
			// What arrived by now still counts.
			select {
			case r := <-s.ch:
				h.take(s, r)
				continue
			default:
				return rx{}, false
			}
		}
		t := time.NewTimer(wait)
		select {
		case r := <-s.ch:
			t.Stop()
			h.take(s, r)
		case <-t.C:
		}
	}
}

// collect returns every datagram pred accepts on the socket that is pending or arrives within d.
func (h *Harness) collect(via string, d time.Duration, pred func(rx) bool) []rx {
	until := time.Now().Add(d)
	var out []rx
	for {
		r, ok := h.recv(via, until, pred)
		if !ok {
			return out
		}
		out = append(out, r)
	}
}

// flush drops what is pending on the socket (kept in the capture).
func (h *Harness) flush(via string) {
	s := h.sock(via)
	for {
		select {
		case r := <-s.ch:
			h.take(s, r)
			continue
		default:
		}
		break
	}
	s.pending = s.pending[:0]
}

// sleep waits d, scaled by nothing: the scenario's own pauses.
func (h *Harness) sleep(d time.Duration) { time.Sleep(d) }

// deadline is now plus the run's timeout for one expected message.
func (h *Harness) deadline() time.Time { return time.Now().Add(h.cfg.Timeout) }

// hexOf is a datagram's or a symbol's hex for a failure's expected and got: the first 96
// octets, then how many there are (a symbol of 4 KiB would drown the report; the first
// differing octet is named separately).
func hexOf(b []byte) string {
	const keep = 96
	if len(b) <= keep {
		return hex.EncodeToString(b)
	}
	return fmt.Sprintf("%s...(%d octets)", hex.EncodeToString(b[:keep]), len(b))
}

// list joins values for a report line.
func list[T any](xs []T) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, x)
	}
	return b.String()
}
