package flow

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/wire"
)

// TestLimitsMinEffective: the effective limits are the minimum of both sides (draft, Session).
func TestLimitsMinEffective(t *testing.T) {
	a := DefaultLimits()
	b := Limits{Schemes: wire.SchemeSet(0).With(wire.SchemeCauchy), MaxK: 16, MaxM: 20, MaxT: 9000, MaxOpenBlocks: 8}
	got := a.Min(b)
	want := Limits{Schemes: wire.SchemeSet(0).With(wire.SchemeCauchy), MaxK: 16, MaxM: 16, MaxT: 4096, MaxOpenBlocks: 8}
	if got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
}

// TestConfigCheckC6a: k <= Max k, m <= Max m, k + m <= 255, T <= Max T, XOR has m <= 1.
func TestConfigCheckC6a(t *testing.T) {
	l := DefaultLimits()
	l.MaxK, l.MaxM = 255, 255
	ok := Config{ID: 1, Scheme: wire.SchemeCauchy, K: 32, M: 4, T: 1058}
	if err := ok.Check(l); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{Scheme: wire.SchemeCauchy, K: 250, M: 6, T: 100},
		{Scheme: wire.SchemeCauchy, K: 0, M: 1, T: 100},
		{Scheme: wire.SchemeCauchy, K: 8, M: 1, T: 5000},
		{Scheme: wire.SchemeXOR, K: 8, M: 2, T: 100},
		{Scheme: wire.SchemeSourceCopy, K: 8, M: 1, T: 100},
	} {
		if c.Check(l) == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
}

// TestQueueBoundedReuse: the datagram queue refuses beyond its bound and reuses buffers.
func TestQueueBoundedReuse(t *testing.T) {
	q := NewQueue(2)
	to := netip.MustParseAddrPort("10.0.0.1:5")
	for i := range 3 {
		b := q.Next()
		if i == 2 {
			if b != nil {
				t.Fatal("queue beyond its bound")
			}
			break
		}
		q.Commit(to, append(b, byte(i)))
	}
	n := 0
	q.Drain(func(d Datagram) { n++ })
	if n != 2 || q.Len() != 0 {
		t.Fatal(n)
	}
	if a := testing.AllocsPerRun(100, func() { q.Commit(to, append(q.Next(), 1)); q.Drain(func(Datagram) {}) }); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

// TestRTTRFC6298C4: the first sample replaces the initial value; later ones are smoothed with
// alpha 1/8.
func TestRTTRFC6298C4(t *testing.T) {
	r := NewRTT(0)
	if r.SRTT() != DefaultInitialRTT {
		t.Fatal(r.SRTT())
	}
	r.Sample(8 * time.Millisecond)
	r.Sample(16 * time.Millisecond)
	if r.SRTT() != 9*time.Millisecond || r.Samples() != 2 {
		t.Fatal(r.SRTT())
	}
}

// TestLimitsRequireScheme1: support for scheme 1 is REQUIRED: limits without it are refused.
func TestLimitsRequireScheme1(t *testing.T) {
	l := DefaultLimits()
	l.Schemes = wire.SchemeSet(0).With(wire.SchemeXOR)
	if l.Check() == nil {
		t.Fatal("limits without scheme 1 accepted")
	}
}
