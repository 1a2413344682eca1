package sim

import (
	"encoding/binary"
	"fmt"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
)

// Codec chooses the CREM engines' codec in a trial.
type Codec uint8

// The codecs.
const (
	// CodecAuto is the real codec for messages up to RealCodecLimit and the symbolic one above.
	CodecAuto Codec = iota
	// CodecReal is package fec: repair symbols computed and decoded byte for byte.
	CodecReal
	// CodecSymbolic decides decodability exactly (fec.Block, the MDS rule) without computing
	// bytes; restored packets are rebuilt from what the requester sent.
	CodecSymbolic
)

// RealCodecLimit is the largest message CodecAuto codes with the real codec.
const RealCodecLimit = 16 << 20

// symbolic reports whether p's CREM engines use the symbolic codec.
func (p *Params) symbolic() bool {
	return p.Codec == CodecSymbolic || p.Codec == CodecAuto && p.Size > RealCodecLimit
}

// symPrefix is what the symbolic codec reads of a source symbol: the length prefix and the BTH
// up to its PSN. The engines keep only that much of each source (flow.SourcePrefixer).
const symPrefix = 2 + 12

// symMagic starts a symbolic repair symbol; the block's first PSN follows.
const symMagic = 0x53594d31 // "SYM1"

// symEncoder is the CSF's symbolic codec: a repair symbol carries no code, only the block's
// first PSN (read from the sources it is computed over), so the symbolic decoder can name the
// packets it restores.
type symEncoder struct{}

var (
	_ flow.Encoder        = symEncoder{}
	_ flow.SourcePrefixer = symEncoder{}
	_ flow.SourcePrefixer = (*symDecoder)(nil)
)

// SourcePrefix says the encoder reads only the first symPrefix octets of a source symbol.
func (symEncoder) SourcePrefix() int { return symPrefix }

// basePSN returns the block's first PSN from any source symbol (len || packet) in over.
func basePSN(over psn.Bitmap, src [][]byte) (psn.PSN, bool) {
	var base psn.PSN
	ok := false
	over.Each(func(j int) {
		if ok || j >= len(src) || len(src[j]) < symPrefix {
			return
		}
		p := src[j][2:]
		base, ok = psn.PSN(uint32(p[9])<<16|uint32(p[10])<<8|uint32(p[11])).Add(-j), true
	})
	return base, ok
}

func stamp(dst []byte, base psn.PSN, ok bool) {
	if len(dst) < 8 {
		return
	}
	clear(dst[:8])
	if ok {
		binary.BigEndian.PutUint32(dst, symMagic)
		binary.BigEndian.PutUint32(dst[4:], uint32(base))
	}
}

func (symEncoder) Encode(dst [][]byte, indices []int, over psn.Bitmap, src [][]byte) error {
	base, ok := basePSN(over, src)
	for _, d := range dst {
		stamp(d, base, ok)
	}
	return nil
}

func (symEncoder) XOR(dst []byte, present psn.Bitmap, src [][]byte) error {
	base, ok := basePSN(present, src)
	stamp(dst, base, ok)
	return nil
}

// symDecoder is the CRF's symbolic codec: fec.Block's bookkeeping decides what is solvable, and
// a restored packet is the packet the requester sent at that PSN, rebuilt by the simulator (the
// CRF checks it with the simulator's own check, S17, and the sink compares every octet).
type symDecoder struct {
	blk     fec.Block
	T       int
	base    psn.PSN
	hasBase bool
	packet  func(psn.PSN) ([]byte, bool)
}

var _ flow.Decoder = (*symDecoder)(nil)

// SourcePrefix says the decoder reads only the first symPrefix octets of a source symbol (the
// first symPrefix - 2 of a payload AddSource gets).
func (d *symDecoder) SourcePrefix() int { return symPrefix }

func (d *symDecoder) Reset(s fec.Scheme, k, T int, present psn.Bitmap) error {
	d.T, d.hasBase = T, false
	return d.blk.Reset(s, k, present)
}

func (d *symDecoder) learn(j int, pkt []byte) {
	if !d.hasBase && len(pkt) >= 12 {
		d.base = psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11])).Add(-j)
		d.hasBase = true
	}
}

func (d *symDecoder) AddSource(j int, payload []byte) error {
	if err := d.blk.AddSource(j); err != nil {
		return err
	}
	d.learn(j, payload)
	return nil
}

func (d *symDecoder) AddSourceSymbol(j int, sym []byte) error {
	if len(sym) != d.T {
		return fmt.Errorf("sim: symbolic source symbol %d of %d octets, T = %d: %w", j, len(sym), d.T, fec.ErrSymbolLength)
	}
	p, err := fec.Payload(sym)
	if err != nil {
		return fmt.Errorf("sim: symbolic source symbol %d: %w", j, err)
	}
	if err := d.blk.AddSource(j); err != nil {
		return err
	}
	d.learn(j, p)
	return nil
}

func (d *symDecoder) AddRepair(i int, over psn.Bitmap, sym []byte) error {
	if len(sym) != d.T {
		return fmt.Errorf("sim: symbolic repair %d of %d octets, T = %d: %w", i, len(sym), d.T, fec.ErrSymbolLength)
	}
	if err := d.blk.AddRepair(i, over); err != nil {
		return err
	}
	if !d.hasBase && binary.BigEndian.Uint32(sym) == symMagic {
		d.base, d.hasBase = psn.PSN(binary.BigEndian.Uint32(sym[4:])), true
	}
	return nil
}

func (d *symDecoder) Status() fec.Status { return d.blk.Status() }

func (d *symDecoder) Decode() (psn.Bitmap, error) {
	_, s, err := d.blk.Plan(nil)
	if err != nil || s.U == 0 {
		return psn.Bitmap{}, err
	}
	return d.blk.Restore()
}

func (d *symDecoder) Payload(j int) ([]byte, error) {
	if !d.hasBase {
		return nil, fmt.Errorf("sim: symbolic block without a known first PSN")
	}
	if known := d.blk.Known(); !known.Has(j) {
		return nil, fmt.Errorf("sim: symbolic source %d is not known", j)
	}
	p, ok := d.packet(d.base.Add(j))
	if !ok {
		return nil, fmt.Errorf("sim: no packet was sent at PSN %d", d.base.Add(j))
	}
	return p, nil
}

// sentPackets remembers every data packet the requester sent by its offset from the message's
// first PSN, as headers, tail and place (see flights), so any of them can be rebuilt.
type sentPackets struct {
	fl   *flights
	ents []flight
	have []bool
}

// reserve makes room for the records of n packets at once, so that a long message's record is
// not copied as it grows.
func (s *sentPackets) reserve(n int) {
	if n > len(s.ents) {
		s.ents = append(s.ents, make([]flight, n-len(s.ents))...)
		s.have = append(s.have, make([]bool, n-len(s.have))...)
	}
}

// put records e, the packed form of the packet first sent with PSN p.
func (s *sentPackets) put(p psn.PSN, e flight) {
	i := int(s.fl.first.Forward(p))
	if i >= len(s.ents) {
		n := max(i+1, 2*len(s.ents))
		s.ents = append(s.ents, make([]flight, n-len(s.ents))...)
		s.have = append(s.have, make([]bool, n-len(s.have))...)
	}
	s.ents[i], s.have[i] = e, true
}

func (s *sentPackets) packet(p psn.PSN) ([]byte, bool) {
	i := int(s.fl.first.Forward(p))
	if i >= len(s.ents) || !s.have[i] {
		return nil, false
	}
	e := &s.ents[i]
	b := make([]byte, int(e.hn)+int(e.n)+int(e.tn))
	copy(b, e.head[:e.hn])
	copy(b[e.hn:], s.fl.src[e.off:e.off+int64(e.n)])
	copy(b[int(e.hn)+int(e.n):], e.tail[:e.tn])
	return b, true
}
