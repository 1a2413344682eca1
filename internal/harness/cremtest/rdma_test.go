package cremtest

import (
	"testing"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// TestRDMAAckReleasesBlocks: the RDMA receiver's ACK passing back through the CSF releases the
// blocks it covers (the draft: sources are kept until the RDMA transport acknowledges them).
func TestRDMAAckReleasesBlocks(t *testing.T) {
	p, err := NewPair(Config{Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 4, 1, 0), csf.WithAdaptation(false),
		csf.WithReverseQP(0x22)}}) // the QP Pair.Ack addresses
	if err != nil {
		t.Fatal(err)
	}
	establish(t, p)
	for range 8 {
		p.Send(p.Synth.Next(300))
	}
	p.RunFor(5 * time.Millisecond)
	p.Ack(5)
	p.RunFor(5 * time.Millisecond)
	if st := p.Sender.Stats(); st.BlocksAcked != 1 || st.ReverseAcks != 1 {
		t.Fatalf("acked %d (reverse %d)", st.BlocksAcked, st.ReverseAcks)
	}
}

// TestReadRequestEndToEnd (C13): a lost READ request is restored; the PSNs it consumes are absent
// on both sides and never asked for.
func TestReadRequestEndToEnd(t *testing.T) {
	p, err := NewPair(Config{Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 8, 1, 0), csf.WithAdaptation(false)}})
	if err != nil {
		t.Fatal(err)
	}
	establish(t, p)
	p.Send(p.Synth.Next(300)) // PSN 0
	read, err := p.Synth.Read(1, 4*1024)
	if err != nil {
		t.Fatal(err)
	}
	p.Link.Filter = Drop(Forward, RDMA, 1)
	p.Send(read) // PSNs 1..4
	for q := psn.PSN(5); q < 8; q++ {
		pk, _ := p.Synth.Write(q, 300)
		p.Send(pk)
	}
	p.RunFor(50 * time.Millisecond)
	st := p.Receiver.Stats().Flows
	if o := p.Outcomes[1]; o == nil || o.Restored != 1 || o.Wrong != 0 {
		t.Fatalf("READ request: %+v", o)
	}
	if st.RangeRequests != 0 || st.Requests != 0 || st.Abandoned != 0 {
		t.Fatalf("asked for absent PSNs: %+v", st)
	}
}
