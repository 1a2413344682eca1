package flow

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestTimersOrder: entries come out earliest first, ties by index; Compact keeps exactly the
// entries it is told are current, still in order.
func TestTimersOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var h Timers
	var all []Timer
	for i := range 1000 {
		x := Timer{At: time.Duration(rng.IntN(100)), Index: int32(rng.IntN(50)), Gen: uint64(i)}
		h.Push(x)
		all = append(all, x)
	}
	h.Compact(func(x Timer) bool { return x.Gen%3 != 0 })
	all = slices.DeleteFunc(all, func(x Timer) bool { return x.Gen%3 == 0 })
	slices.SortFunc(all, func(a, b Timer) int {
		if a.before(b) {
			return -1
		}
		if b.before(a) {
			return 1
		}
		return 0
	})
	if h.Len() != len(all) {
		t.Fatalf("%d entries after Compact, want %d", h.Len(), len(all))
	}
	for i, want := range all {
		if top, ok := h.Peek(); !ok || top != want {
			t.Fatalf("entry %d: peek %+v, want %+v", i, top, want)
		}
		if got := h.Pop(); got != want {
			t.Fatalf("entry %d: %+v, want %+v", i, got, want)
		}
	}
	if _, ok := h.Peek(); ok || h.Len() != 0 {
		t.Fatal("entries left")
	}
}
