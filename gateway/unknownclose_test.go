//go:build linux

package gateway

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/wire"
)

// TestUnknownFlowAnsweredWithClose: a PARAM_UPDATE or REPAIR for a Flow ID no CRF of the gateway
// holds (its peer's session lost in a restart) is answered with CLOSE reason 5 naming that Flow
// ID, to the address it came from (G58); other messages for unknown flows are not answered; the
// answers stay within their budget under a flood (64 at once, 256 a second).
func TestUnknownFlowAnsweredWithClose(t *testing.T) {
	g := newTestGateway(t, Options{Seed: 1}, nil)
	peer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	from := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	send := func(m wire.Message) {
		b, err := m.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		p := &pkt{buf: b, n: len(b), kind: kindCREM, from: netip.AddrPortFrom(from.Addr().Unmap(), from.Port())}
		if sh := g.shardFor(p); sh != nil {
			t.Fatal("a message for an unknown flow found a shard")
		}
	}
	read := func() (wire.Close, bool) {
		buf := make([]byte, 64)
		peer.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, _, err := peer.ReadFromUDPAddrPort(buf)
		if err != nil {
			return wire.Close{}, false
		}
		c, err := wire.ParseClose(buf[:n])
		if err != nil {
			t.Fatalf("answer %x: %v", buf[:n], err)
		}
		return c, true
	}
	send(&wire.ParamUpdate{FlowID: 0x5eed, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: 1100})
	if c, ok := read(); !ok || c.FlowID != 0x5eed || c.Reason != wire.ReasonProtocolError {
		t.Fatalf("answer to a PARAM_UPDATE for an unknown flow: %+v %v", c, ok)
	}
	send(&wire.LossReport{FlowID: 0x5eed, IntervalUS: 20000, Expected: 10, Received: 10})
	send(&wire.Close{FlowID: 0x5eed, Reason: wire.ReasonProtocolError})
	if c, ok := read(); ok {
		t.Fatalf("a LOSS_REPORT or CLOSE for an unknown flow answered: %+v", c)
	}
	for range 1000 {
		send(&wire.ParamUpdate{FlowID: 0x600d, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: 1100})
	}
	got := 0
	for {
		if _, ok := read(); !ok {
			break
		}
		got++
	}
	sent, capped := g.unknownClose.counts()
	if got > closeAnswerBurst+8 || got == 0 || sent != uint64(got)+1 || capped < 1000-uint64(got)-8 {
		t.Fatalf("a flood of 1000: %d answers received, %d sent, %d capped; want %d or so", got, sent, capped, closeAnswerBurst)
	}
}
