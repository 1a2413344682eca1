package cremtest

import (
	"fmt"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// Synth builds the RDMA sender's packets of one flow: RDMA WRITE packets with consecutive PSNs,
// payloads derived from the PSN, and an ICRC sealed under the flow's logical header (C12).
type Synth struct {
	Desc flow.Descriptor
	PSN  psn.PSN // the next PSN
}

// Next returns the next packet, carrying n payload octets, and advances the PSN.
func (s *Synth) Next(n int) []byte {
	pkt, err := s.Write(s.PSN, n)
	if err != nil {
		panic(err) // a programming error in the test's own arguments
	}
	s.PSN = s.PSN.Add(1)
	return pkt
}

// Write builds the RDMA WRITE MIDDLE packet with PSN p and n payload octets.
func (s *Synth) Write(p psn.PSN, n int) ([]byte, error) {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(uint32(p)*7 + uint32(i)*13)
	}
	pkt := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, PKey: 0xffff, DestQP: s.Desc.DestQP, PSN: p}, Payload: payload}
	b, err := pkt.Append(nil)
	if err != nil {
		return nil, fmt.Errorf("cremtest: building PSN %v: %w", p, err)
	}
	if err := s.Desc.LogicalHeader().Seal(b); err != nil {
		return nil, fmt.Errorf("cremtest: sealing PSN %v: %w", p, err)
	}
	return b, nil
}

// Read builds an RDMA READ request at PSN p for dma octets (it consumes several PSNs, C13).
func (s *Synth) Read(p psn.PSN, dma uint32) ([]byte, error) {
	pkt := roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, PKey: 0xffff, DestQP: s.Desc.DestQP, PSN: p},
		RETH: roce.RETH{VA: 0x1000, RKey: 7, DMALength: dma}}
	b, err := pkt.Append(nil)
	if err != nil {
		return nil, err
	}
	return b, s.Desc.LogicalHeader().Seal(b)
}

// Ack builds the RDMA receiver's ACKNOWLEDGE of every PSN through p, to queue pair qp.
func Ack(qp uint32, p psn.PSN) []byte {
	pkt := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, PKey: 0xffff, DestQP: qp, PSN: p}, AETH: roce.ACK(31, 0)}
	b, _ := pkt.Append(nil)
	return b
}

// Packet builds a packet of opcode op with PSN p and n payload octets: a SEND or WRITE (a
// RETH on WRITE FIRST and ONLY, DMA Length n), or a READ response (an AETH on FIRST, LAST and
// ONLY), as the RDMA sender of either direction emits them.
func (s *Synth) Packet(op roce.Opcode, p psn.PSN, n int) ([]byte, error) {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(uint32(p)*7 + uint32(i)*13 + uint32(op))
	}
	pkt := roce.Packet{BTH: roce.BTH{OpCode: op, PKey: 0xffff, DestQP: s.Desc.DestQP, PSN: p}, Payload: payload}
	switch op {
	case roce.OpWriteFirst, roce.OpWriteOnly, roce.OpWriteOnlyWithImmediate:
		pkt.RETH = roce.RETH{VA: 0x1000, RKey: 7, DMALength: uint32(n)}
	case roce.OpReadResponseFirst, roce.OpReadResponseLast, roce.OpReadResponseOnly:
		pkt.AETH = roce.ACK(31, uint32(p))
	}
	b, err := pkt.Append(nil)
	if err != nil {
		return nil, fmt.Errorf("cremtest: building %v at PSN %v: %w", op, p, err)
	}
	if err := s.Desc.LogicalHeader().Seal(b); err != nil {
		return nil, fmt.Errorf("cremtest: sealing PSN %v: %w", p, err)
	}
	return b, nil
}
