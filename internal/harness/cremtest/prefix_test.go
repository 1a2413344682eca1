package cremtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// prefixEncoder and prefixDecoder stand in for a simulator's symbolic codec: they read only the
// length and BTH of each source (flow.SourcePrefixer); the decoder decides with fec.Block and
// restores a packet from what the RDMA sender sent, found by the PSN a source's prefix names.
type prefixEncoder struct{}

func (prefixEncoder) SourcePrefix() int { return 14 }

func (prefixEncoder) Encode(dst [][]byte, _ []int, _ psn.Bitmap, src [][]byte) error {
	for _, d := range dst {
		clear(d)
	}
	return nil
}

func (prefixEncoder) XOR(dst []byte, _ psn.Bitmap, _ [][]byte) error { clear(dst); return nil }

type prefixDecoder struct {
	blk     fec.Block
	base    psn.PSN
	hasBase bool
	sent    func(psn.PSN) ([]byte, bool)
}

func (d *prefixDecoder) SourcePrefix() int { return 14 }

func (d *prefixDecoder) Reset(s fec.Scheme, k, T int, present psn.Bitmap) error {
	d.hasBase = false
	return d.blk.Reset(s, k, present)
}

func (d *prefixDecoder) learn(j int, p []byte) {
	if !d.hasBase && len(p) >= 12 {
		d.base, d.hasBase = psn.PSN(uint32(p[9])<<16|uint32(p[10])<<8|uint32(p[11])).Add(-j), true
	}
}

func (d *prefixDecoder) AddSource(j int, payload []byte) error {
	if err := d.blk.AddSource(j); err != nil {
		return err
	}
	d.learn(j, payload)
	return nil
}

func (d *prefixDecoder) AddSourceSymbol(j int, sym []byte) error {
	p, err := fec.Payload(sym) // the kept prefix, then zeros: a valid symbol
	if err != nil {
		return err
	}
	if err := d.blk.AddSource(j); err != nil {
		return err
	}
	d.learn(j, p)
	return nil
}

func (d *prefixDecoder) AddRepair(i int, over psn.Bitmap, _ []byte) error {
	return d.blk.AddRepair(i, over)
}
func (d *prefixDecoder) Status() fec.Status          { return d.blk.Status() }
func (d *prefixDecoder) Decode() (psn.Bitmap, error) { return d.blk.Restore() }

func (d *prefixDecoder) Payload(j int) ([]byte, error) {
	if p, ok := d.sent(d.base.Add(j)); d.hasBase && ok {
		return p, nil
	}
	return nil, fmt.Errorf("no packet sent at position %d", j)
}

// TestPrefixCodecFallback: with a codec that reads a prefix at both ends, a loss that coded
// retransmission cannot repair (every coded symbol lost) is restored from the FALLBACK answer's
// Source Copy, which carries only the prefix: the packet passes its ICRC check (C12) and reaches
// the RDMA receiver byte for byte, in either delivery mode (C7 a).
func TestPrefixCodecFallback(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		var p *Pair
		var err error
		p, err = NewPair(Config{
			Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 4, 1, 0), csf.WithAdaptation(false),
				csf.WithEncoder(prefixEncoder{}), csf.WithRepairFraction(16)},
			Receiver: []crf.Option{crf.WithDecoders(func() (flow.Decoder, error) {
				return &prefixDecoder{sent: func(q psn.PSN) ([]byte, bool) { b, ok := p.Sent[q]; return b, ok }}, nil
			})},
			Settings: crf.Settings{Ordered: ordered},
		})
		if err != nil {
			t.Fatal(err)
		}
		establish(t, p)
		first := p.Synth.PSN
		lost := first.Add(2)
		p.Link.Filter = func(pk *Packet) Fate {
			if pk.Dir != Forward {
				return Fate{}
			}
			if pk.Kind == RDMA {
				return Fate{Drop: pk.PSN == lost || len(pk.Data) >= 12 && psn.PSN(uint32(pk.Data[9])<<16|uint32(pk.Data[10])<<8|uint32(pk.Data[11])) == lost}
			}
			m, err := wire.ParseRepair(pk.Data)
			return Fate{Drop: err == nil && m.Scheme != wire.SchemeSourceCopy && !m.Info}
		}
		for range 4 {
			p.Send(p.Synth.Next(300))
		}
		p.RunFor(time.Second)
		checkOutcomes(t, p)
		o, sst, st := p.Outcomes[lost], p.Sender.Stats(), p.Receiver.Stats().Flows
		if o == nil || o.Restored != 1 || o.Wrong != 0 || sst.SourceCopySent == 0 || st.RestoredSourceCopy != 1 || st.ICRCMismatch != 0 {
			t.Fatalf("ordered %v: outcome %+v\nsender %+v\nreceiver %+v", ordered, o, sst, st)
		}
	}
}
