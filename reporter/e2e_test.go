package reporter_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// run sends 256 packets over a path that drops every 16th; when report is true, a path
// reporter at the dropping node tells the CSF. It returns both engines' counters.
func run(t *testing.T, report bool) (csf.Stats, uint64, uint64, uint64) {
	t.Helper()
	reporterAddr := netip.MustParseAddrPort("10.0.0.9:50000")
	p, err := cremtest.NewPair(cremtest.Config{
		Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 16, 0, 0), csf.WithAdaptation(false),
			csf.WithReporters(reporterAddr.Addr())},
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := reporter.New(reporter.Config{NodeID: 9, Port: 50000})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	p.RunFor(10 * time.Millisecond)
	src := p.CSFAddr.Addr()
	p.Link.Filter = func(pk *cremtest.Packet) cremtest.Fate {
		if pk.Kind != cremtest.RDMA || pk.Dir != cremtest.Forward || pk.N%16 != 5 {
			return cremtest.Fate{}
		}
		if report {
			bth, _, err := roce.ParseBTH(pk.Data)
			if err != nil {
				t.Fatalf("synthetic packet: %v", err)
			}
			rep.Drop(p.Clock.Now(), reporter.FlowKey{Src: src, Dst: p.CRFAddr.Addr(), FlowLabel: bth.DestQP}, 1, bth.PSN, wire.CauseCorruption)
		}
		return cremtest.Fate{Drop: true}
	}
	step := func() {
		p.RunFor(10 * time.Microsecond)
		rep.Tick(p.Clock.Now())
		rep.Drain(func(d reporter.Datagram) {
			if d.To.Port() != 50000 {
				t.Fatalf("report to port %d", d.To.Port())
			}
			p.Inject(cremtest.Backward, reporterAddr, d.Payload)
		})
	}
	for range 256 {
		p.Send(p.Synth.Next(1000))
		step()
	}
	for range 5000 {
		step()
	}
	fs, _ := p.Receiver.FlowStats(p.FlowID())
	for q, o := range p.Outcomes {
		if o.Wrong > 0 {
			t.Fatalf("PSN %v delivered wrong", q)
		}
	}
	return p.Sender.Stats(), fs.Restored, fs.Requests + fs.RangeRequests, fs.Abandoned
}

// TestPathReportTriggersProactiveRepairC16: with a path reporter naming the dropped PSNs, the
// CSF sends ordinary repair for the affected blocks at once (C16), and the CRF restores every
// loss without asking; without it (m = 0), every loss costs a request and a coded round.
func TestPathReportTriggersProactiveRepairC16(t *testing.T) {
	without, restoredWithout, requestsWithout, _ := run(t, false)
	with, restoredWith, requestsWith, abandoned := run(t, true)
	t.Logf("without reports: restored %d, requests %d, retx %d; with: restored %d, requests %d, extra %d, retx %d",
		restoredWithout, requestsWithout, without.RetxSent, restoredWith, requestsWith, with.ExtraSent, with.RetxSent)
	if with.PathReports == 0 || with.PathReportsRejected != 0 {
		t.Fatalf("CSF took %d reports, rejected %d", with.PathReports, with.PathReportsRejected)
	}
	if with.ExtraSent < 16 {
		t.Fatalf("CSF sent %d proactive symbols for 16 reported drops", with.ExtraSent)
	}
	if restoredWith != 16 || abandoned != 0 {
		t.Fatalf("restored %d of 16 with reports, abandoned %d", restoredWith, abandoned)
	}
	if requestsWith >= requestsWithout || with.RetxSent >= without.RetxSent {
		t.Fatalf("reports saved nothing: requests %d vs %d, coded retransmissions %d vs %d",
			requestsWith, requestsWithout, with.RetxSent, without.RetxSent)
	}
}
