package rc

import (
	"errors"
	"fmt"
)

// Access is a set of rights on a memory region.
type Access uint8

// The access rights of a memory region.
const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
	AccessRemoteAtomic
)

// MR is a registered memory region: Len octets addressed by the peer as Addr.. Addr+Len-1 under
// RKey. An ordinary region is the caller's buffer; one registered with RegisterPlacer has no
// memory, and what WRITEs place in it goes to its Placer.
type MR struct {
	Addr   uint64
	RKey   uint32
	Access Access
	buf    []byte
	n      uint64 // the region's length: len(buf) when it has memory
	pl     Placer
}

// Placer takes what remote WRITEs place in a region registered with RegisterPlacer: Place gets
// each packet's payload as the responder places it, at its offset in the region, once per
// placement. p belongs to the packet and is valid only during the call.
type Placer interface {
	Place(off int, p []byte)
}

// Bytes returns the region's memory (nil for a Placer's region).
func (m *MR) Bytes() []byte { return m.buf }

// Len returns the region's length.
func (m *MR) Len() int { return int(m.n) }

// errAccess is why a remote request may not touch memory; the responder answers it with NAK
// remote access error.
var errAccess = errors.New("rc: remote access error")

// regions is the QP's table of memory regions.
type regions struct {
	byKey map[uint32]*MR
	next  uint64 // counter that derives addresses and keys
	qpn   uint32
}

// RegisterMR registers buf with the given rights and returns its region.
func (q *QP) RegisterMR(buf []byte, acc Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("rc: register: empty buffer")
	}
	return q.register(buf, uint64(len(buf)), acc), nil
}

// RegisterPlacer registers a region of n octets with no memory behind it: what remote WRITEs
// place in it goes to pl (a simulator checks a message of any length against its source that
// way, keeping none of it). Writes are its only rights (remote and local); READ and atomics
// need memory.
func (q *QP) RegisterPlacer(n int, pl Placer, acc Access) (*MR, error) {
	switch {
	case n <= 0:
		return nil, fmt.Errorf("rc: register: placer region of %d octets", n)
	case pl == nil:
		return nil, fmt.Errorf("rc: register: placer region without a placer")
	case acc&^(AccessRemoteWrite|AccessLocalWrite) != 0:
		return nil, fmt.Errorf("rc: register: a placer region takes writes only (access %#x)", acc)
	}
	m := q.register(nil, uint64(n), acc)
	m.pl = pl
	return m, nil
}

func (q *QP) register(buf []byte, n uint64, acc Access) *MR {
	r := &q.mrs
	if r.byKey == nil {
		r.byKey = map[uint32]*MR{}
	}
	for {
		r.next++
		key := uint32(mix64(uint64(r.qpn)<<32 | r.next))
		if key == 0 || r.byKey[key] != nil {
			continue
		}
		// Regions get disjoint, page-aligned addresses far from zero, so an address names
		// one region only.
		m := &MR{Addr: 0x10000000000 + r.next<<32, RKey: key, Access: acc, buf: buf, n: n}
		r.byKey[key] = m
		return m
	}
}

// DeregisterMR removes a region; requests naming its key then fail with a remote access error.
func (q *QP) DeregisterMR(m *MR) { delete(q.mrs.byKey, m.RKey) }

// lookup returns the memory a remote request for n octets at va under rkey may touch with the
// right need, or errAccess. It never returns memory outside one region.
func (r *regions) lookup(rkey uint32, va uint64, n uint64, need Access) ([]byte, error) {
	t, err := r.resolve(rkey, va, n, need)
	if err != nil {
		return nil, err
	}
	if t.pl != nil {
		return nil, errAccess // registration gives a placer's region no rights that get here
	}
	return t.mem, nil
}

// target is what a remote WRITE of n octets places into: mem[0:n] of a region's memory, or its
// region's Placer from offset base.
type target struct {
	mem  []byte
	n    int
	pl   Placer
	base int
}

// resolve returns what a remote request for n octets at va under rkey may touch with the right
// need, or errAccess. It never returns memory outside one region.
func (r *regions) resolve(rkey uint32, va uint64, n uint64, need Access) (target, error) {
	if n == 0 {
		return target{}, nil // a zero-length request touches nothing; IBTA does not check its key
	}
	m := r.byKey[rkey]
	if m == nil || m.Access&need != need {
		return target{}, errAccess
	}
	if va < m.Addr || va-m.Addr > m.n || n > m.n-(va-m.Addr) {
		return target{}, errAccess
	}
	off := va - m.Addr
	if m.pl != nil {
		return target{n: int(n), pl: m.pl, base: int(off)}, nil
	}
	return target{mem: m.buf[off : off+n : off+n], n: int(n)}, nil
}

// place puts p at offset x of the target (what of it falls within its n octets).
func (t *target) place(x int, p []byte) {
	if x >= t.n || len(p) == 0 {
		return
	}
	p = p[:min(len(p), t.n-x)]
	if t.pl != nil {
		t.pl.Place(t.base+x, p)
		return
	}
	copy(t.mem[x:], p)
}

// mix64 is splitmix64's finalizer: keys that are not a plain counter.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
