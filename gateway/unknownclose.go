package gateway

import (
	"net/netip"
	"sync"
	"time"

	"github.com/crem-project/crem/wire"
)

// unknownCloser answers REPAIRs and PARAM_UPDATEs for Flow IDs no CRF of the gateway holds with
// a CLOSE, reason 5 (protocol error), to the address they came from (E70, G58): the peer's CSF,
// whose session this gateway lost in a restart, learns it within a round trip and starts a new
// one, instead of sending repair into nothing until its silence timer ends the session. The
// answers share one token bucket, so the gateway is a poor reflector: at most closeAnswerRate a
// second (closeAnswerBurst at once), each 12 octets, never more than the message it answers.
type unknownCloser struct {
	mu     sync.Mutex
	tokens float64
	at     time.Duration
	primed bool
	sent   uint64 // CLOSEs sent
	capped uint64 // unknown-flow messages left unanswered: the bucket was empty
}

// The answers' budget: enough for every flow of a busy peer to hear within a second, too little
// to matter as reflected traffic (256 x 12 octets a second).
const (
	closeAnswerRate  = 256
	closeAnswerBurst = 64
)

// take spends a token at now, if one is left.
func (u *unknownCloser) take(now time.Duration) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.primed {
		u.primed, u.tokens, u.at = true, closeAnswerBurst, now
	}
	if now > u.at {
		u.tokens = min(closeAnswerBurst, u.tokens+float64(now-u.at)*closeAnswerRate/float64(time.Second))
		u.at = now
	}
	if u.tokens < 1 {
		u.capped++
		return false
	}
	u.tokens--
	u.sent++
	return true
}

func (u *unknownCloser) counts() (sent, capped uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sent, u.capped
}

// answerUnknownFlow answers a REPAIR or PARAM_UPDATE b for Flow ID id, which routes to no
// shard, with CLOSE reason 5 to from, within the budget (G58). A message shorter than a CLOSE
// gets no answer: an answer is never larger than what it answers.
func (g *Gateway) answerUnknownFlow(b []byte, id uint32, from netip.AddrPort) {
	t := wire.Type(b[0] & 0x0f)
	if t != wire.TypeRepair && t != wire.TypeParamUpdate || id == 0 || !from.IsValid() || g.crem == nil {
		return
	}
	var buf [16]byte
	msg, err := (&wire.Close{FlowID: id, Reason: wire.ReasonProtocolError}).Append(buf[:0])
	if err != nil || len(b) < len(msg) || !g.unknownClose.take(g.now()) {
		return
	}
	to := from
	if g.crem.sock6 && to.Addr().Is4() {
		to = netip.AddrPortFrom(netip.AddrFrom16(to.Addr().As16()), to.Port())
	}
	if _, err := g.crem.conn.WriteToUDPAddrPort(msg, to); err != nil {
		g.c.writeErrors.Add(1)
		return
	}
	g.c.tx[kindCREM].Add(1)
	g.c.txBytes[kindCREM].Add(uint64(len(msg)))
}
