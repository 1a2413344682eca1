package cremtest

import (
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// countingEncoder and countingDecoder stand in for a simulator's codec: they wrap package fec's
// and count the calls, showing that the engines use the codec they are given.
type countingEncoder struct {
	*fec.Encoder
	n int
}

func (e *countingEncoder) Encode(dst [][]byte, idx []int, over psn.Bitmap, src [][]byte) error {
	e.n++
	return e.Encoder.Encode(dst, idx, over, src)
}

type countingDecoder struct {
	*fec.Decoder
	n *int
}

func (d countingDecoder) Decode() (psn.Bitmap, error) {
	*d.n++
	return d.Decoder.Decode()
}

// TestCodecSeam: both engines run on an injected codec (flow.Encoder, flow.Decoder).
func TestCodecSeam(t *testing.T) {
	fe, _ := fec.NewEncoder()
	enc := &countingEncoder{Encoder: fe}
	decodes := 0
	p, err := NewPair(Config{
		Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 4, 1, 0), csf.WithAdaptation(false), csf.WithEncoder(enc)},
		Receiver: []crf.Option{crf.WithDecoders(func() (flow.Decoder, error) {
			d, err := fec.NewDecoder()
			return countingDecoder{Decoder: d, n: &decodes}, err
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	establish(t, p)
	p.Link.Filter = Drop(Forward, RDMA, 2)
	for range 4 {
		p.Send(p.Synth.Next(300))
	}
	p.RunFor(20 * time.Millisecond)
	if enc.n != 1 || decodes != 1 || p.Outcomes[2] == nil || p.Outcomes[2].Restored != 1 {
		t.Fatalf("encodes %d, decodes %d, outcome %+v", enc.n, decodes, p.Outcomes[2])
	}
}
