package csf

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// A flow whose PARAM_UPDATEs are refused now and then, each refused one accepted when offered
// again (a CRF whose configuration slots are full for a while), says so in the log at most once
// a minute, with how many refusals the line stands for; every refusal is counted.
func TestRefusedParamUpdateLoggedOnceAMinute(t *testing.T) {
	var log bytes.Buffer
	s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 0, 0), WithAdaptation(false),
		WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	now := time.Millisecond
	pu := hello(t, s, now, 3)
	next := psn.PSN(0x100)
	// apply sends sources past the update's Effective PSN: its configuration is then in force.
	apply := func(u *wire.ParamUpdate) {
		t.Helper()
		for n := 0; n < 1<<16 && (n < 64 || next.Before(u.EffectivePSN.Add(64))); n++ {
			s.Observe(now, packet(next, 200))
			next = next.Add(1)
		}
		drain(s)
		s.Acknowledge(next.Add(-1)) // the older configuration's blocks go (E80)
		if c, ok := s.Config(); !ok || c.ID != u.ConfigID {
			t.Fatalf("configuration %d not in force (%+v)", u.ConfigID, c)
		}
	}
	paramAck(s, now, 3, pu.ConfigID, wire.StatusAccepted)
	apply(pu)
	refused := 0
	for m := 1; now < 150*time.Second; m = m%4 + 1 {
		now += 5 * time.Second
		cfg, _ := s.Config()
		cfg.M = m
		if err := s.Reconfigure(now, cfg); err != nil {
			t.Fatal(err)
		}
		pus := paramUpdates(drain(s))
		if len(pus) != 1 {
			t.Fatalf("at %v: %d PARAM_UPDATEs for m %d", now, len(pus), m)
		}
		paramAck(s, now, 3, pus[0].ConfigID, wire.StatusResourcesExhausted)
		refused++
		// Offered again after the back-off, and accepted.
		d, ok := s.NextDeadline()
		if !ok {
			t.Fatal("no deadline for offering the refused configuration again")
		}
		now = max(d, now+time.Millisecond)
		s.Tick(now)
		again := paramUpdates(drain(s))
		if len(again) != 1 {
			t.Fatalf("at %v: the refused configuration not offered again (%d)", now, len(again))
		}
		paramAck(s, now, 3, again[0].ConfigID, wire.StatusAccepted)
		apply(again[0])
	}
	lines := strings.Count(log.String(), "PARAM_UPDATE refused")
	if st := s.Stats(); st.ParamRejected != uint64(refused) || refused < 25 {
		t.Fatalf("%d refusals counted of %d", st.ParamRejected, refused)
	}
	// 150 s: the first refusal's line, then at most one a minute.
	if lines < 1 || lines > 3 {
		t.Fatalf("%d log lines for %d refusals in 150 s, want 1 to 3:\n%s", lines, refused, log.String())
	}
	t.Logf("%d refusals in 150 s, %d log lines", refused, lines)
}
