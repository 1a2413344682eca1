package lab

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/netem"
)

// TestReporterSavesRepairRoundsC16 runs crem+tcaeth and crem+tcaeth+reporter at the same seeds
// over bursty loss (Gilbert-Elliott, 2 percent in bursts of 4) with blocks of 8 and m = 2, so that
// some blocks lose more than m. Every byte of both is verified. With the reporter in the path the
// CSFs accept its PATH_REPORTs (C14: from its address only) and answer the dropped PSNs with extra
// ordinary repair (C16); without it there is none. The reporter hears of exactly the RoCEv2
// datagrams the path dropped, and every report it makes is sent. Summed over six seeds (one
// seed's figures vary with the machine's timing on real sockets), the reporter's runs need fewer
// REPAIR_REQUESTs or fewer coded retransmissions: the extra repair reaches the CRF before it
// declares the block incomplete (measured, four times six seeds on a loaded 2-core machine:
// coded retransmissions 52 to 71 without the reporter, 43 to 51 with it; REPAIR_REQUESTs 30 to 45
// and 26 to 35; RDMA retransmissions 103 to 139 and 47 to 77).
func TestReporterSavesRepairRoundsC16(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the lab twelve times (about 5 s)")
	}
	loss, err := netem.ParseLossSpec("gilbert-burst:rate=2%,burst=4")
	if err != nil {
		t.Fatal(err)
	}
	type sums struct{ requests, coded, rdma, reports, repair uint64 }
	var without, with sums
	for seed := uint64(1); seed <= 6; seed++ {
		res, err := Lab(context.Background(), Options{RTT: 20 * time.Millisecond, Loss: loss, Rate: 200e6, Messages: 8, Size: 512 << 10,
			K: 8, M: 2, QPs: 2, Seed: seed, Runs: []string{"crem+tcaeth", ReporterConfiguration}, Timeout: 40 * time.Second,
			RetryCount: stallRetries})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Runs) != 2 {
			t.Fatalf("seed %d: runs %+v", seed, res.Runs)
		}
		for i, r := range res.Runs {
			if !r.Verified {
				t.Fatalf("seed %d: %s did not verify: %s", seed, r.Name, r.Error)
			}
			s := &without
			if i == 1 {
				s = &with
			}
			s.requests += r.RepairRequests
			s.coded += r.CodedRetx
			s.rdma += r.RDMARetx
			s.reports += r.PathReports
			s.repair += r.ReportRepair
		}
		c, p := res.Runs[0], res.Runs[1]
		if c.PathReports != 0 || c.ReportRepair != 0 || c.Reporter != nil {
			t.Fatalf("seed %d: crem+tcaeth without a reporter: %d path reports, %d report repair, reporter %+v", seed, c.PathReports, c.ReportRepair, c.Reporter)
		}
		rep := p.Reporter
		if rep == nil {
			t.Fatalf("seed %d: %s has no reporter figures", seed, p.Name)
		}
		t.Logf("seed %d: requests %d -> %d, coded retx %d -> %d, RDMA retx %d -> %d; reporter %+v, CSFs accepted %d, repair %d",
			seed, c.RepairRequests, p.RepairRequests, c.CodedRetx, p.CodedRetx, c.RDMARetx, p.RDMARetx, *rep, p.PathReports, p.ReportRepair)
		if p.PathReports == 0 || p.ReportRepair == 0 {
			t.Errorf("seed %d: with the reporter the CSFs accepted %d PATH_REPORTs and sent %d symbols for them", seed, p.PathReports, p.ReportRepair)
		}
		var roceLost uint64
		for _, q := range p.PerQP {
			roceLost += q.Lost
		}
		if rep.Drops != roceLost || rep.Corruption+rep.Congestion != rep.Drops || rep.Drops == 0 {
			t.Errorf("seed %d: reporter told of %d drops (%d corruption, %d congestion), the path dropped %d RoCEv2 datagrams",
				seed, rep.Drops, rep.Corruption, rep.Congestion, roceLost)
		}
		if rep.Sent != rep.Reports || rep.SendErrors != 0 || rep.Rejected != 0 || rep.PSNs == 0 || rep.HoldS != 0 ||
			rep.Sent != p.PathReports+rep.Unclaimed {
			t.Errorf("seed %d: reporter %+v", seed, *rep)
		}
	}
	t.Logf("six seeds: without the reporter %+v, with it %+v", without, with)
	if testenv.Race {
		t.Skip("the race detector slows the engines: the extra repair's race with the CRF's request says nothing")
	}
	if with.requests >= without.requests && with.coded >= without.coded {
		t.Errorf("the reporter saved nothing: REPAIR_REQUESTs %d against %d without it, coded retransmissions %d against %d",
			with.requests, without.requests, with.coded, without.coded)
	}
}

// TestReporterRunSelection: Options.Reporter adds crem+tcaeth+reporter after the default runs;
// "+reporter" follows CREM configurations only.
func TestReporterRunSelection(t *testing.T) {
	o := Options{Reporter: true}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(Configurations), ReporterConfiguration); !slices.Equal(o.Runs, want) {
		t.Fatalf("runs %v, want %v", o.Runs, want)
	}
	if len(Configurations) != 4 {
		t.Fatalf("the default runs changed: %v", Configurations)
	}
	for name, ok := range map[string]bool{ReporterConfiguration: true, "crem+gbn+reporter": true, "tcaeth+reporter": false,
		"gbn+reporter": false, "crem+tcaeth+reporter+reporter": false, "reporter": false} {
		k, err := parseRun(name)
		if (err == nil) != ok || ok && (!k.crem || !k.reporter) {
			t.Errorf("%q: %+v, %v", name, k, err)
		}
	}
	if k, err := parseRun("crem+tcaeth"); err != nil || k.reporter {
		t.Errorf("crem+tcaeth: %+v %v", k, err)
	}
}
