package sim

import (
	"encoding/binary"
	"fmt"
)

// DefaultPeriod is the length of the seeded pattern a synthetic region repeats.
const DefaultPeriod = 1 << 20

// Region is a synthetic memory region: Len octets whose content at offset x is the seeded
// pattern at x mod Period. Where the operating system allows (Linux), a region longer than its
// period maps the same Period octets of physical memory again and again, so a 1 GiB region
// costs Period octets; elsewhere it is an ordinary allocation.
//
// A region used as a source holds the pattern; one used as a destination starts zeroed and,
// once every offset has been written with the pattern, Check passes. The simulator's trials use
// none (see Regions; protocol notes S26: copies over the aliases are slow on some machines); the
// soak harness does, for READs need memory as long as the region.
type Region struct {
	buf    []byte
	period int
	free   func() error
}

// pattern fills b with the seeded pattern (a splitmix64 stream).
func pattern(b []byte, seed uint64) {
	x := seed
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		binary.LittleEndian.PutUint64(w[:], z|1<<63) // never an all-zero word
		copy(b[i:], w[:])
	}
}

// NewSource returns a region of n octets holding the pattern of seed.
func NewSource(n, period int, seed uint64) (*Region, error) {
	r, err := newRegion(n, period)
	if err != nil {
		return nil, err
	}
	pattern(r.buf[:min(r.period, n)], seed)
	return r, nil
}

// NewSink returns a zeroed region of n octets with the given period, for a destination.
func NewSink(n, period int) (*Region, error) { return newRegion(n, period) }

func newRegion(n, period int) (*Region, error) {
	if n <= 0 {
		return nil, fmt.Errorf("sim: region of %d octets", n)
	}
	if period <= 0 {
		period = DefaultPeriod
	}
	period = (period + pageSize - 1) / pageSize * pageSize
	if n <= period {
		return &Region{buf: make([]byte, n), period: period}, nil
	}
	buf, free, err := mapAliased(n, period)
	if err != nil {
		return nil, fmt.Errorf("sim: region of %d octets: %w", n, err)
	}
	return &Region{buf: buf, period: period, free: free}, nil
}

// Bytes returns the region's memory: Len octets, aliased with period Period.
func (r *Region) Bytes() []byte { return r.buf }

// Len returns the region's length.
func (r *Region) Len() int { return len(r.buf) }

// Resident returns the octets of memory the region really holds.
func (r *Region) Resident() int { return min(len(r.buf), r.period) }

// Check reports whether the region holds the pattern of seed at every offset it really holds.
func (r *Region) Check(seed uint64) error { return r.CheckPrefix(r.Len(), seed) }

// CheckPrefix is Check for a message that wrote only the first n octets.
func (r *Region) CheckPrefix(n int, seed uint64) error {
	n = min(n, r.Resident())
	want := make([]byte, n)
	pattern(want, seed)
	got := r.buf[:n]
	for i := 0; i < n; i += 4096 {
		j := min(i+4096, n)
		if string(got[i:j]) != string(want[i:j]) {
			return fmt.Errorf("sim: region differs from its pattern in octets %d..%d", i, j-1)
		}
	}
	return nil
}

// Matches reports whether the first n octets of r equal those of src (a source region of the same
// period), comparing the memory both really hold: the check of CheckPrefix without computing the
// pattern again.
func (r *Region) Matches(src *Region, n int) error {
	n = min(n, r.Resident(), src.Resident())
	got, want := r.buf[:n], src.buf[:n]
	for i := 0; i < n; i += 4096 {
		j := min(i+4096, n)
		if string(got[i:j]) != string(want[i:j]) {
			return fmt.Errorf("sim: region differs from its pattern in octets %d..%d", i, j-1)
		}
	}
	return nil
}

// Free releases the region's mapping; the region must not be used afterwards.
func (r *Region) Free() error {
	if r.free == nil {
		r.buf = nil
		return nil
	}
	err := r.free()
	r.buf, r.free = nil, nil
	return err
}

// Zero clears the memory the region really holds, so it can take another message.
func (r *Region) Zero() { clear(r.buf[:r.Resident()]) }

// Regions is a trial's source and sink, kept from trial to trial by one worker. The source holds
// one period of the pattern of Seed, not the message: the requester's WRITEs repeat it
// (rc.SendWR.Length), so octet x of a WRITE is the source's octet x mod the period. The sink
// holds none of the message: it is the responder's region (rc.QP.RegisterPlacer) and checks
// every octet placed in it against the source at its place (S5). It is not safe for concurrent
// use.
type Regions struct {
	Seed   uint64
	src    []byte
	period int
	sink   sink
}

// get returns the source (min(n, period) octets, the period rounded up to whole pages) and the
// sink, emptied, of a WRITE of n octets at MTU mtu.
func (rs *Regions) get(n, period, mtu int) (src []byte, snk *sink, err error) {
	if n <= 0 || mtu <= 0 {
		return nil, nil, fmt.Errorf("sim: region of %d octets at MTU %d", n, mtu)
	}
	if period <= 0 {
		period = DefaultPeriod
	}
	period = (period + pageSize - 1) / pageSize * pageSize
	m := min(n, period)
	if len(rs.src) < m || rs.period != period {
		rs.src, rs.period = make([]byte, m), period
		pattern(rs.src, rs.Seed)
		rs.sink.want = rs.src
	}
	rs.sink.reset(n, mtu)
	return rs.src[:m:m], &rs.sink, nil
}

// Free releases the regions.
func (rs *Regions) Free() { *rs = Regions{Seed: rs.Seed} }

// sink is a responder's region that keeps nothing (an rc.Placer): every octet placed must equal
// want at its place (octet x of the region is want[x mod len(want)]), and every slot of the
// region (an MTU) must have been placed.
type sink struct {
	want   []byte
	n      int      // the region's length
	slot   int      // the placement unit (the MTU)
	placed []uint64 // the slots placed, a bit each
	octets int64    // octets placed, duplicates included
	err    error    // the first difference
}

// reset empties the sink for a region of n octets placed in slots of mtu octets.
func (s *sink) reset(n, mtu int) {
	words := ((n+mtu-1)/mtu + 63) / 64
	if cap(s.placed) < words {
		s.placed = make([]uint64, words)
	}
	s.placed = s.placed[:words]
	clear(s.placed)
	s.n, s.slot, s.octets, s.err = n, mtu, 0, nil
}

// Place checks p, placed at offset off of the region, against want and marks its slots.
func (s *sink) Place(off int, p []byte) {
	s.octets += int64(len(p))
	for k := off / s.slot; k <= (off+len(p)-1)/s.slot; k++ {
		s.placed[k/64] |= 1 << (k % 64)
	}
	for x := off; len(p) > 0 && s.err == nil; {
		at := x % len(s.want)
		k := min(len(p), len(s.want)-at)
		if string(p[:k]) != string(s.want[at:at+k]) {
			i := 0
			for p[i] == s.want[at+i] {
				i++
			}
			s.err = fmt.Errorf("sim: octet %d of the responder's region differs from the source", x+i)
		}
		p, x = p[k:], x+k
	}
}

// check returns the first difference placed, or that some of the region or of the message's
// size octets was not placed.
func (s *sink) check(size int64) error {
	if s.err != nil {
		return s.err
	}
	if s.octets < size {
		return fmt.Errorf("sim: %d octets placed, the message has %d", s.octets, size)
	}
	for k := range (s.n + s.slot - 1) / s.slot {
		if s.placed[k/64]&(1<<(k%64)) == 0 {
			return fmt.Errorf("sim: octets %d.. of the responder's region were never placed", k*s.slot)
		}
	}
	return nil
}
