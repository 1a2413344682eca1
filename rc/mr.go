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

// MR is a registered memory region: Len octets of the caller's buffer, addressed by the peer
// as Addr.. Addr+Len-1 under RKey.
type MR struct {
	Addr   uint64
	RKey   uint32
	Access Access
	buf    []byte
}

// Bytes returns the region's memory.
func (m *MR) Bytes() []byte { return m.buf }

// Len returns the region's length.
func (m *MR) Len() int { return len(m.buf) }

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
		m := &MR{Addr: 0x10000000000 + r.next<<32, RKey: key, Access: acc, buf: buf}
		r.byKey[key] = m
		return m, nil
	}
}

// DeregisterMR removes a region; requests naming its key then fail with a remote access error.
func (q *QP) DeregisterMR(m *MR) { delete(q.mrs.byKey, m.RKey) }

// lookup returns the memory a remote request for n octets at va under rkey may touch with the
// right need, or errAccess. It never returns memory outside one region.
func (r *regions) lookup(rkey uint32, va uint64, n uint64, need Access) ([]byte, error) {
	if n == 0 {
		return nil, nil // a zero-length request touches nothing; IBTA does not check its key
	}
	m := r.byKey[rkey]
	if m == nil || m.Access&need != need {
		return nil, errAccess
	}
	if va < m.Addr || va-m.Addr > uint64(len(m.buf)) || n > uint64(len(m.buf))-(va-m.Addr) {
		return nil, errAccess
	}
	off := va - m.Addr
	return m.buf[off : off+n : off+n], nil
}

// mix64 is splitmix64's finalizer: keys that are not a plain counter.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
