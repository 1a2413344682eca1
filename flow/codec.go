package flow

import (
	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/psn"
)

// Encoder is the CSF's codec: package fec's *fec.Encoder, or a stand-in (a simulator's symbolic
// codec, which need not compute bytes).
type Encoder interface {
	// Encode computes the scheme 1 repair symbols with the given Repair Indices over the set
	// L into dst (see fec.Encoder.Encode).
	Encode(dst [][]byte, indices []int, over psn.Bitmap, src [][]byte) error
	// XOR computes the scheme 2 repair symbol over the present positions.
	XOR(dst []byte, present psn.Bitmap, src [][]byte) error
}

// Decoder is the CRF's codec for one block at a time: package fec's *fec.Decoder, or a
// stand-in. A stand-in's restored packets still go through the ICRC check (C12), so a symbolic
// one returns the real packet from Payload.
type Decoder interface {
	Reset(s fec.Scheme, k, T int, present psn.Bitmap) error
	AddSource(j int, payload []byte) error
	AddSourceSymbol(j int, sym []byte) error
	AddRepair(i int, over psn.Bitmap, sym []byte) error
	Status() fec.Status
	Decode() (psn.Bitmap, error)
	Payload(j int) ([]byte, error)
}

var (
	_ Encoder = (*fec.Encoder)(nil)
	_ Decoder = (*fec.Decoder)(nil)
)

// SourcePrefixer is implemented by a codec that reads only the first SourcePrefix() octets of
// each source symbol (S = len || P || padding): a symbolic codec that needs a source's length
// and the start of its header, not its data. The engines then keep only that prefix of each
// source they protect: the CSF hands the encoder symbols cut to it, the CRF hands the decoder
// payloads cut to SourcePrefix()-2 octets, and a Source Copy symbol carries zeros after it. Both
// ends must use such a codec. A codec that does not implement it reads every octet, and the
// engines keep whole sources.
type SourcePrefixer interface {
	SourcePrefix() int
}

// SourcePrefix returns the octets of each source symbol codec c reads: c's SourcePrefix() if it
// implements SourcePrefixer with a value of at least 2 (the length), else 0, meaning all.
func SourcePrefix(c any) int {
	if p, ok := c.(SourcePrefixer); ok {
		if n := p.SourcePrefix(); n >= 2 {
			return n
		}
	}
	return 0
}
