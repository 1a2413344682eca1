package crf

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// verify checks a restored packet's ICRC over the header it will be delivered with (C12).
func (r *Receiver) verify(f *rflow, pkt []byte) error {
	switch f.set.Verify {
	case VerifyFunc:
		if f.set.Verifier == nil {
			return errors.New("crf: no verifier")
		}
		return f.set.Verifier(pkt)
	case VerifyTemplate:
		ip, udp, err := f.template(psnOf(pkt), len(pkt))
		if err != nil {
			return err
		}
		return roce.VerifyICRC(ip, udp, pkt)
	}
	h := f.desc.LogicalHeader()
	if h.SrcPort == 0 && len(f.tmplUDP) == 8 {
		// Transparent mode with no configured source port: the flow's own packets tell it
		// (their UDP source port is part of the logical header the endpoint sealed under).
		h.SrcPort = binary.BigEndian.Uint16(f.tmplUDP)
	}
	return h.Verify(pkt)
}

// SetTemplate sets the IP and UDP header of flow id's latest received source packet, which
// restored packets are verified and delivered under in transparent mode (C12). The driver
// calls it as source packets arrive; the header is copied.
func (r *Receiver) SetTemplate(id uint32, ip, udp []byte) error {
	f := r.flows[id]
	if f == nil {
		return fmt.Errorf("crf: SetTemplate: no flow %#x", id)
	}
	if len(udp) != 8 || len(ip) < 20 || len(ip)+8 > len(f.hdr) {
		return fmt.Errorf("crf: SetTemplate: IP header of %d and UDP header of %d octets", len(ip), len(udp))
	}
	f.tmplIP = append(f.tmplIP[:0], ip...)
	f.tmplUDP = append(f.tmplUDP[:0], udp...)
	return nil
}

// template returns the flow's header for PSN p with its lengths set for a UDP payload of n
// octets, and an IPv4 Identification interpolated from the PSN neighbours (C12).
func (f *rflow) template(p psn.PSN, n int) (ip, udp []byte, err error) {
	if len(f.tmplIP) == 0 {
		return nil, nil, errors.New("crf: transparent mode without a header template")
	}
	b := append(f.hdr[:0], f.tmplIP...)
	b = append(b, f.tmplUDP...)
	ip, udp = b[:len(f.tmplIP)], b[len(f.tmplIP):]
	switch ip[0] >> 4 {
	case 4:
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+8+n))
		if id, ok := f.interpolateID(p); ok {
			binary.BigEndian.PutUint16(ip[4:], id)
		}
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	case 6:
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-40+8+n))
	}
	binary.BigEndian.PutUint16(udp[4:], uint16(8+n))
	return ip, udp, nil
}

// interpolateID returns the IPv4 Identification PSN p would have carried: interpolated between
// the nearest received neighbours in PSN order, or stepped from the one on one side (a RoCE NIC
// sending a constant Identification gives that constant).
func (f *rflow) interpolateID(p psn.PSN) (uint16, bool) {
	const reach = 256
	var a, b *slot
	da, db := 0, 0
	for d := 1; d <= reach && (a == nil || b == nil); d++ {
		if a == nil {
			if s := f.at(p.Add(-d)); s != nil && s.hasID {
				a, da = s, d
			}
		}
		if b == nil {
			if s := f.at(p.Add(d)); s != nil && s.hasID {
				b, db = s, d
			}
		}
	}
	switch {
	case a != nil && b != nil:
		span := uint16(b.ipid - a.ipid)
		return a.ipid + uint16(int(span)*da/(da+db)), true
	case a != nil:
		return a.ipid + f.idStep*uint16(da), true
	case b != nil:
		return b.ipid - f.idStep*uint16(db), true
	}
	return 0, false
}

// ipv4Checksum returns the header checksum of an IPv4 header whose checksum field is zero.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// psnOf reads the BTH PSN of a RoCEv2 packet (0 if it is too short to have one).
func psnOf(pkt []byte) psn.PSN {
	if len(pkt) < roce.BTHLen {
		return 0
	}
	return psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
}

// Template returns the IP and UDP header a restored packet with PSN p of n octets is delivered
// under in transparent mode (copies), for a driver that writes it to a TUN device.
func (r *Receiver) Template(id uint32, p psn.PSN, n int) (ip, udp []byte, err error) {
	f := r.flows[id]
	if f == nil {
		return nil, nil, fmt.Errorf("crf: Template: no flow %#x", id)
	}
	ip, udp, err = f.template(p, n)
	if err != nil {
		return nil, nil, err
	}
	return append([]byte(nil), ip...), append([]byte(nil), udp...), nil
}
