package flow

import "time"

// Timer is one deadline of an engine's object: the object's index in the engine's table and
// its generation there (a slot reused by a newer object has a newer generation).
type Timer struct {
	At    time.Duration
	Index int32
	Gen   uint64
}

func (a Timer) before(b Timer) bool {
	if a.At != b.At {
		return a.At < b.At
	}
	if a.Index != b.Index {
		return a.Index < b.Index
	}
	return a.Gen < b.Gen
}

// Timers is a min-heap of deadlines with lazy invalidation: when an object's deadline changes,
// its owner pushes the new one and leaves the old entry, which it recognizes as stale when the
// entry reaches the top (the object's generation or deadline no longer match). The earliest
// deadline then costs O(1) and a change O(log n), whatever the number of objects, where a scan
// would look at every one. Ties go to the lower index, so the order is deterministic.
type Timers struct {
	h []Timer
}

// Len returns the entries held, stale ones included.
func (t *Timers) Len() int { return len(t.h) }

// Reset drops every entry and keeps the storage.
func (t *Timers) Reset() { t.h = t.h[:0] }

// Push adds an entry.
func (t *Timers) Push(x Timer) {
	t.h = append(t.h, x)
	t.up(len(t.h) - 1)
}

// Peek returns the earliest entry, if any.
func (t *Timers) Peek() (Timer, bool) {
	if len(t.h) == 0 {
		return Timer{}, false
	}
	return t.h[0], true
}

// Pop removes and returns the earliest entry; the heap must not be empty.
func (t *Timers) Pop() Timer {
	x := t.h[0]
	n := len(t.h) - 1
	t.h[0] = t.h[n]
	t.h = t.h[:n]
	if n > 0 {
		t.down(0)
	}
	return x
}

// Compact keeps only the entries valid says are current: it bounds the heap when deadlines
// change much more often than they fall due.
func (t *Timers) Compact(valid func(Timer) bool) {
	n := 0
	for _, x := range t.h {
		if valid(x) {
			t.h[n] = x
			n++
		}
	}
	t.h = t.h[:n]
	for i := n/2 - 1; i >= 0; i-- {
		t.down(i)
	}
}

func (t *Timers) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.h[i].before(t.h[p]) {
			return
		}
		t.h[i], t.h[p] = t.h[p], t.h[i]
		i = p
	}
}

func (t *Timers) down(i int) {
	n := len(t.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.h[r].before(t.h[l]) {
			m = r
		}
		if !t.h[m].before(t.h[i]) {
			return
		}
		t.h[i], t.h[m] = t.h[m], t.h[i]
		i = m
	}
}
