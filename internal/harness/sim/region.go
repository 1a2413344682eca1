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
// once every offset has been written with the pattern, Check passes.
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

// Regions is a source and a sink kept from trial to trial by one worker, so a trial does not
// map and fill its memory again: the source holds the pattern of Seed, and the sink is zeroed
// before each use. It is not safe for concurrent use.
type Regions struct {
	Seed     uint64
	src, dst *Region
	period   int
}

// get returns a source and a zeroed sink of at least n octets with the given period.
func (rs *Regions) get(n, period int) (src, dst *Region, err error) {
	if period <= 0 {
		period = DefaultPeriod
	}
	if rs.src == nil || rs.src.Len() < n || rs.period != period {
		rs.Free()
		if rs.src, err = NewSource(n, period, rs.Seed); err != nil {
			return nil, nil, err
		}
		if rs.dst, err = NewSink(n, period); err != nil {
			rs.Free()
			return nil, nil, err
		}
		rs.period = period
	} else {
		rs.dst.Zero()
	}
	return rs.src, rs.dst, nil
}

// Free releases the regions.
func (rs *Regions) Free() {
	for _, r := range []*Region{rs.src, rs.dst} {
		if r != nil {
			r.Free()
		}
	}
	rs.src, rs.dst = nil, nil
}
