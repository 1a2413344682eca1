package conform_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/crem-project/crem/internal/harness/conform"
	"github.com/crem-project/crem/wire"
)

// mangler sits between the runner and a gateway's CREM socket and changes what the gateway
// says, as a target departing from the draft would: the scenarios must see it. It makes the
// departures of the mutation check from outside the engines, so that the scenarios' power is
// shown before the engines can plant the faults themselves.
type mangler struct {
	toRunner, toTarget *net.UDPConn // the side the runner talks to, the side the gateway talks to
	target             netip.AddrPort
	mu                 sync.Mutex
	runner             netip.AddrPort // the runner's socket that spoke last (at first its CREM socket)
	edit               func(b []byte, n int) [][]byte
	count              int
}

func newMangler(t *testing.T, edit func(b []byte, n int) [][]byte) *mangler {
	m := &mangler{toRunner: bound(t, "127.0.0.1"), toTarget: bound(t, "127.0.0.1"), edit: edit}
	go func() { // runner -> gateway, unchanged
		buf := make([]byte, 65536)
		for {
			n, from, err := m.toRunner.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			m.mu.Lock()
			m.runner = from // the gateway's answers go to the runner's socket that spoke last
			tg := m.target
			m.mu.Unlock()
			m.toTarget.WriteToUDPAddrPort(buf[:n], tg)
		}
	}()
	go func() { // gateway -> runner, edited
		buf := make([]byte, 65536)
		for {
			n, _, err := m.toTarget.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			m.mu.Lock()
			to := m.runner
			m.count++
			out := m.edit(append([]byte(nil), buf[:n]...), m.count)
			m.mu.Unlock()
			for _, b := range out {
				m.toRunner.WriteToUDPAddrPort(b, to)
			}
		}
	}()
	t.Cleanup(func() { m.toRunner.Close(); m.toTarget.Close() })
	return m
}

func typeOf(b []byte) wire.Type {
	if len(b) < wire.HeaderLen {
		return 0
	}
	return wire.Type(b[0] & 0x0f)
}

// The departures and the scenario that must catch each.
var departures = []struct {
	name, scenario string
	half           conform.Half
	because        string // in the failure's reason: it failed for the departure
	edit           func(b []byte, n int) [][]byte
}{
	{"repair symbol octet changed (a wrong coefficient)", "csf/repair-symbols", conform.HalfCSF, "differs from the recomputation", func(b []byte, n int) [][]byte {
		if typeOf(b) == wire.TypeRepair && b[1]&wire.FlagRepairInfo == 0 {
			b[len(b)-1] ^= 0x5a
		}
		return [][]byte{b}
	}},
	{"every coded retransmission sent twice, the copy with a fresh index (M above X)", "csf/request-m-within-x", conform.HalfCSF, "more symbols than lost packets", func(b []byte, n int) [][]byte {
		if typeOf(b) == wire.TypeRepair && b[1]&wire.FlagRepairRetx != 0 {
			c := append([]byte(nil), b...)
			c[11] += 100
			return [][]byte{b, c}
		}
		return [][]byte{b}
	}},
	{"every HELLO twice (no backoff)", "csf/hello-backoff", conform.HalfCSF, "HELLO retransmitted", func(b []byte, n int) [][]byte {
		if typeOf(b) == wire.TypeHello {
			return [][]byte{b, b}
		}
		return [][]byte{b}
	}},
	{"HELLO_ACK padded to 48 octets (amplification)", "crf/hello-ack", conform.HalfCRF, "larger than HELLO", func(b []byte, n int) [][]byte {
		if typeOf(b) == wire.TypeHelloAck {
			b = append(b, make([]byte, 16)...)
			binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		}
		return [][]byte{b}
	}},
	{"three LOSS_REPORTs in four dropped (rare reports)", "crf/loss-report-interval", conform.HalfCRF, "loss report", func(b []byte, n int) [][]byte {
		if typeOf(b) == wire.TypeLossReport && n%4 != 0 {
			return nil
		}
		return [][]byte{b}
	}},
	{"LOSS_REPORT leaves out a loss (miscount)", "crf/loss-report-counts", conform.HalfCRF, "counts disagree", func(b []byte, n int) [][]byte {
		if typeOf(b) == wire.TypeLossReport {
			if exp, rcv := binary.BigEndian.Uint32(b[12:]), binary.BigEndian.Uint32(b[16:]); exp > rcv {
				binary.BigEndian.PutUint32(b[12:], exp-1)
			}
		}
		return [][]byte{b}
	}},
	{"CLOSE after unanswered PARAM_UPDATEs never sent (retried forever)", "csf/param-eight-attempts", conform.HalfCSF, "no CLOSE", func(b []byte, n int) [][]byte {
		if typeOf(b) == wire.TypeClose {
			return nil
		}
		return [][]byte{b}
	}},
	{"REPAIR_REQUEST's Suggested M above X", "crf/request-format", conform.HalfCRF, "Suggested M", func(b []byte, n int) [][]byte {
		if typeOf(b) == wire.TypeRepairRequest && b[1]&wire.FlagRequestRanges == 0 {
			b[15] = 0x7f
		}
		return [][]byte{b}
	}},
}

// TestConformCatchesDepartures: each departure above, made by a proxy between the runner and a
// right gateway, fails its scenario (and the same scenario passes without it: TestConformCSF,
// TestConformCRF).
func TestConformCatchesDepartures(t *testing.T) {
	for _, d := range departures {
		t.Run(d.scenario, func(t *testing.T) {
			mg := newMangler(t, d.edit)
			tg := startTargetVia(t, d.half, ap(mg.toTarget))
			defer tg.stop()
			mg.mu.Lock()
			mg.target, mg.runner = tg.cfg.Target, ap(tg.cfg.CREMConn)
			mg.mu.Unlock()
			cfg := tg.cfg
			cfg.Target = ap(mg.toRunner)
			cfg.Run = mustRegexp(t, "^"+d.scenario+"$")
			rep, err := conform.Run(cfg, conform.Scenarios())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Results) != 1 || rep.Results[0].Status != conform.Fail || !strings.Contains(rep.Results[0].Reason, d.because) {
				t.Fatalf("%s: %s did not fail for it (want a reason with %q): %+v", d.name, d.scenario, d.because, rep.Results)
			}
			t.Logf("%s: %s failed: %s (expected %s; got %s)", d.name, d.scenario, rep.Results[0].Reason, rep.Results[0].Expected, rep.Results[0].Got)
		})
	}
}
