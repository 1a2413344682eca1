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
// RKey. An ordinary region is the caller's buffer; a periodic one (RegisterPeriodicMR) is longer
// than its buffer, and its octet x is the buffer's octet x mod its length.
type MR struct {
	Addr   uint64
	RKey   uint32
	Access Access
	buf    []byte
	n      uint64 // the region's length: len(buf), or more for a periodic region
}

// Bytes returns the region's memory: its buffer (one period of a periodic region).
func (m *MR) Bytes() []byte { return m.buf }

// Len returns the region's length.
func (m *MR) Len() int { return int(m.n) }

// periodic reports whether the region is longer than its buffer.
func (m *MR) periodic() bool { return m.n > uint64(len(m.buf)) }

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

// RegisterPeriodicMR registers a region of n octets whose octet x is buf[x mod len(buf)]: a
// WRITE places each packet's payload at its offset modulo len(buf), so a region of any length
// costs buf. Writes are its only rights (remote and local); READ and atomics need memory of the
// region's length.
func (q *QP) RegisterPeriodicMR(buf []byte, n int, acc Access) (*MR, error) {
	switch {
	case len(buf) == 0:
		return nil, fmt.Errorf("rc: register: empty buffer")
	case n < len(buf):
		return nil, fmt.Errorf("rc: register: periodic region of %d octets shorter than its buffer of %d", n, len(buf))
	case acc&^(AccessRemoteWrite|AccessLocalWrite) != 0:
		return nil, fmt.Errorf("rc: register: a periodic region takes writes only (access %#x)", acc)
	}
	return q.register(buf, uint64(n), acc), nil
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
	if t.period != 0 {
		return nil, errAccess // registration gives a periodic region no rights that get here
	}
	return t.mem, nil
}

// target is the memory a remote WRITE of n octets may place into: mem[0:n] of an ordinary
// region, or for a periodic one offset x of the message at mem[(off+x) mod period].
type target struct {
	mem    []byte
	off    int
	n      int
	period int // 0 for an ordinary region
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
	if m.periodic() {
		p := uint64(len(m.buf))
		return target{mem: m.buf, off: int(off % p), n: int(n), period: int(p)}, nil
	}
	return target{mem: m.buf[off : off+n : off+n], n: int(n)}, nil
}

// place copies p to offset x of the target (within its n octets).
func (t *target) place(x int, p []byte) {
	if x >= t.n {
		return
	}
	p = p[:min(len(p), t.n-x)]
	if t.period == 0 {
		copy(t.mem[x:], p)
		return
	}
	for len(p) > 0 {
		at := (t.off + x) % t.period
		k := copy(t.mem[at:], p)
		p, x = p[k:], x+k
	}
}

// mix64 is splitmix64's finalizer: keys that are not a plain counter.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
