package sim

import (
	"bytes"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// flights keeps the WRITE packets on a link small: a packet whose payload is the source
// region's content at its place travels as its headers, its tail (pad and ICRC) and the place,
// and is rebuilt byte for byte when the link delivers it. The packets in flight at 400 Gbit/s
// and 25 ms (a gigabyte and more) then cost a few dozen octets each. The engines never see the
// difference: the rebuilt packet is the packet the requester sent, ICRC field and all.
type flights struct {
	src   []byte
	span  int64   // the length of one WRITE of the message (CompactWrites)
	first psn.PSN // PSN of the message's first packet
	mtu   int
	ents  []flight
	free  []uint32
	bufs  [][]byte // rebuilt packets the receiver is done with
	small [][]byte // copied ACKs and other short packets the receiver is done with
}

// smallPacket is the largest packet the pool of short buffers serves (ACKs, NAKs, READ
// requests).
const smallPacket = 256

type flight struct {
	head   [roce.BTHLen + roce.RETHLen]byte
	tail   [8]byte
	hn, tn uint8
	off    int64
	n      int32
}

// pack stores pkt and returns its handle (from 1), or 0 when pkt is not a plain WRITE packet
// carrying the source's content at its place.
func (f *flights) pack(pkt []byte) uint64 {
	if f.src == nil || len(pkt) < roce.BTHLen+roce.ICRCLen {
		return 0
	}
	hn := roce.BTHLen
	switch roce.Opcode(pkt[0]) {
	case roce.OpWriteFirst, roce.OpWriteOnly:
		hn += roce.RETHLen
	case roce.OpWriteMiddle, roce.OpWriteLast:
	default:
		return 0
	}
	tn := roce.ICRCLen + int(pkt[1]>>4&3)
	if len(pkt) < hn+tn {
		return 0
	}
	p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
	// The place in src: every WRITE of the message repeats src (CompactWrites).
	off := int64(f.first.Forward(p)) * int64(f.mtu) % f.span % int64(len(f.src))
	payload := pkt[hn : len(pkt)-tn]
	if off+int64(len(payload)) > int64(len(f.src)) || !bytes.Equal(payload, f.src[off:off+int64(len(payload))]) {
		return 0
	}
	var i uint32
	if n := len(f.free); n > 0 {
		i = f.free[n-1]
		f.free = f.free[:n-1]
	} else {
		f.ents = append(f.ents, flight{})
		i = uint32(len(f.ents) - 1)
	}
	e := &f.ents[i]
	copy(e.head[:], pkt[:hn])
	copy(e.tail[:], pkt[len(pkt)-tn:])
	e.hn, e.tn, e.off, e.n = uint8(hn), uint8(tn), off, int32(len(payload))
	return uint64(i) + 1
}

// buffer returns a buffer of n octets from the pool.
func (f *flights) buffer(n int) []byte {
	pool, size := &f.bufs, max(n, f.mtu+64)
	if n <= smallPacket {
		pool, size = &f.small, smallPacket
	}
	if k := len(*pool); k > 0 && cap((*pool)[k-1]) >= n {
		b := (*pool)[k-1][:n]
		*pool = (*pool)[:k-1]
		return b
	}
	return make([]byte, n, size)
}

// clone copies pkt into a buffer from the pool.
func (f *flights) clone(pkt []byte) []byte {
	b := f.buffer(len(pkt))
	copy(b, pkt)
	return b
}

// untrim returns b extended with zeros to n octets, in a buffer from the pool when b is too
// short (b then goes back to the pool).
func (f *flights) untrim(b []byte, n int) []byte {
	if len(b) >= n {
		return b
	}
	if cap(b) >= n {
		m := len(b)
		b = b[:n]
		clear(b[m:])
		return b
	}
	c := f.buffer(n)
	copy(c, b)
	clear(c[len(b):])
	f.recycle(b)
	return c
}

// unpack rebuilds the packet of handle h into a buffer from the pool and forgets h.
func (f *flights) unpack(h uint64) []byte {
	i := uint32(h - 1)
	e := &f.ents[i]
	n := int(e.hn) + int(e.n) + int(e.tn)
	b := f.buffer(n)
	copy(b, e.head[:e.hn])
	copy(b[e.hn:], f.src[e.off:e.off+int64(e.n)])
	copy(b[int(e.hn)+int(e.n):], e.tail[:e.tn])
	f.release(h)
	return b
}

// release forgets handle h (a packet the link dropped).
func (f *flights) release(h uint64) { f.free = append(f.free, uint32(h-1)) }

// recycle returns a rebuilt packet's buffer once its receiver is done with it.
// The pools are bounded: a buffer beyond the bound goes to the collector.
func (f *flights) recycle(b []byte) {
	switch {
	case cap(b) == smallPacket && len(f.small) < 1<<16:
		f.small = append(f.small, b)
	case cap(b) > smallPacket && len(f.bufs) < 64:
		f.bufs = append(f.bufs, b)
	}
}
