package lab

import (
	"strings"
	"testing"
)

// labOf is a lab of four verified runs with the given mean and max completion times.
func labOf(times map[string][2]float64) Result {
	var res Result
	for _, n := range Configurations {
		t := times[n]
		res.Runs = append(res.Runs, Run{Name: n, Verified: true, Messages: 16, MessagesVerified: 16, MeanS: t[0], MaxS: t[1]})
	}
	return res
}

// The verdict compares crem+tcaeth with gbn and with the best other verified run (the lowest
// mean), in mean and in max, as factors of the other's time over crem+tcaeth's.
func TestVerdictSpeedupAgainstGBNAndBestOther(t *testing.T) {
	res := labOf(map[string][2]float64{"gbn": {2, 3}, "tcaeth": {0.5, 0.8}, "crem+gbn": {1, 1.5}, "crem+tcaeth": {0.25, 0.4}})
	v := Judge(res)
	if !v.Verified || v.Speedup == nil {
		t.Fatalf("verdict %+v", v)
	}
	sp := *v.Speedup
	if sp.GBNMean != 8 || sp.GBNMax != 7.5 || sp.BestOther != "tcaeth" || sp.OtherMean != 2 || sp.OtherMax != 2 {
		t.Errorf("speedup %+v, want 8x and 7.5x against gbn, 2x and 2x against tcaeth", sp)
	}
	for _, want := range []string{"verdict: every byte verified (4 runs)", "crem+tcaeth 8.0x faster than gbn in mean, 7.5x faster in max",
		"against the best other, tcaeth: 2.0x faster in mean, 2.0x faster in max"} {
		if !strings.Contains(v.Line, want) {
			t.Errorf("line %q lacks %q", v.Line, want)
		}
	}
	// Slower than the best other: said as slower, not as a factor below 1 "faster".
	res = labOf(map[string][2]float64{"gbn": {2, 3}, "tcaeth": {0.2, 0.5}, "crem+gbn": {1, 1.5}, "crem+tcaeth": {0.25, 0.4}})
	if v := Judge(res); !strings.Contains(v.Line, "tcaeth: 1.2x slower in mean, 1.2x faster in max") {
		t.Errorf("line %q", v.Line)
	}
}

// Each run's losses of data packets balance against what CREM restored and RDMA retransmitted,
// or the difference is named: retransmissions of packets the path had delivered, losses made
// good twice, losses made good by neither; the path's other losses (ACKs, CREM messages) apart.
func TestVerdictBalancesLostAgainstRestoredAndRetransmitted(t *testing.T) {
	res := labOf(map[string][2]float64{"gbn": {2, 3}, "tcaeth": {0.5, 0.8}, "crem+gbn": {1, 1.5}, "crem+tcaeth": {0.25, 0.4}})
	counts := map[string]Run{
		"gbn":         {Lost: 40, DataLost: 30, RDMARetx: 1130, ResentDelivered: 1100}, // go-back-N resends what followed
		"tcaeth":      {Lost: 50, DataLost: 30, RDMARetx: 27},                          // 3 made good by neither
		"crem+gbn":    {Lost: 35, DataLost: 30, Restored: 25, RDMARetx: 60, ResentDelivered: 50},
		"crem+tcaeth": {Lost: 30, DataLost: 30, Restored: 28, RDMARetx: 2}, // balanced
	}
	for i := range res.Runs {
		c := counts[res.Runs[i].Name]
		r := &res.Runs[i]
		r.Lost, r.DataLost, r.Restored, r.RDMARetx, r.ResentDelivered = c.Lost, c.DataLost, c.Restored, c.RDMARetx, c.ResentDelivered
	}
	v := Judge(res)
	want := map[string]Account{
		"gbn":         {Run: "gbn", DataLost: 30, RDMARetx: 1130, ResentDelivered: 1100, OtherLost: 10},
		"tcaeth":      {Run: "tcaeth", DataLost: 30, RDMARetx: 27, Twice: -3, OtherLost: 20},
		"crem+gbn":    {Run: "crem+gbn", DataLost: 30, Restored: 25, RDMARetx: 60, ResentDelivered: 50, Twice: 5, OtherLost: 5},
		"crem+tcaeth": {Run: "crem+tcaeth", DataLost: 30, Restored: 28, RDMARetx: 2, Balanced: true},
	}
	if len(v.Accounts) != 4 {
		t.Fatalf("accounts %+v", v.Accounts)
	}
	for _, a := range v.Accounts {
		if a != want[a.Run] {
			t.Errorf("%s: account %+v, want %+v", a.Run, a, want[a.Run])
		}
	}
	for _, s := range []string{"lost = restored + RDMA retx: gbn 30 = 0 + 1130 - 1100 resent though delivered;",
		"tcaeth 30 = 0 + 27 + 3 made good by neither;", "crem+gbn 30 = 25 + 60 - 50 resent though delivered - 5 made good twice;",
		"crem+tcaeth 30 = 28 + 2"} {
		if !strings.Contains(v.Line, s) {
			t.Errorf("line %q lacks %q", v.Line, s)
		}
	}
}

// A lab cut short names the run interrupted (what it verified and cancelled) and the runs not
// started, balances no run that did not verify, compares nothing with a run cut short, and
// calls nothing failed; a run that failed is named with its error.
func TestVerdictNamesInterruptedNotRunAndFailed(t *testing.T) {
	res := Result{Interrupted: true, NotRun: []string{"crem+gbn", "crem+tcaeth"}, Runs: []Run{
		{Name: "gbn", Messages: 16, Error: "QP 1: retry exceeded", MeanS: 1, MaxS: 2},
		{Name: "tcaeth", Messages: 16, MessagesVerified: 5, Interrupted: true, Cancelled: 4, DataLost: 3, RDMARetx: 1},
	}}
	v := Judge(res)
	if v.Verified || len(v.NotVerified) != 1 || len(v.Interrupted) != 1 || len(v.NotRun) != 2 || v.Speedup != nil || len(v.Accounts) != 0 {
		t.Fatalf("verdict %+v", v)
	}
	want := "verdict: 0 of 4 runs verified every byte; gbn did not verify (QP 1: retry exceeded); " +
		"tcaeth interrupted (5 of 16 messages verified, 4 in flight cancelled); not run: crem+gbn, crem+tcaeth"
	if v.Line != want {
		t.Errorf("line\n%q, want\n%q", v.Line, want)
	}
}
