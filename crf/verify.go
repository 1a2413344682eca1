package crf

import (
	"encoding/binary"
	"errors"
	"fmt"

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
		ip, udp, err := f.template(len(pkt))
		if err != nil {
			return err
		}
		return roce.VerifyICRC(ip, udp, pkt)
	}
	return f.desc.LogicalHeader().Verify(pkt)
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

// template returns the flow's header with its lengths set for a UDP payload of n octets.
func (f *rflow) template(n int) (ip, udp []byte, err error) {
	if len(f.tmplIP) == 0 {
		return nil, nil, errors.New("crf: transparent mode without a header template")
	}
	b := append(f.hdr[:0], f.tmplIP...)
	b = append(b, f.tmplUDP...)
	ip, udp = b[:len(f.tmplIP)], b[len(f.tmplIP):]
	switch ip[0] >> 4 {
	case 4:
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+8+n))
	case 6:
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-40+8+n))
	}
	binary.BigEndian.PutUint16(udp[4:], uint16(8+n))
	return ip, udp, nil
}

// Template returns the IP and UDP header a restored packet of n octets is delivered under in
// transparent mode (a copy), for a driver that writes it to a TUN device.
func (r *Receiver) Template(id uint32, n int) (ip, udp []byte, err error) {
	f := r.flows[id]
	if f == nil {
		return nil, nil, fmt.Errorf("crf: Template: no flow %#x", id)
	}
	ip, udp, err = f.template(n)
	if err != nil {
		return nil, nil, err
	}
	return append([]byte(nil), ip...), append([]byte(nil), udp...), nil
}
