package lab

import (
	"fmt"
	"strings"
)

// Verdict is what a lab proved, from its runs' counts (Judge): whether every byte was
// verified, how much faster crem+tcaeth completed its messages than gbn and than the best other
// configuration, and for each run whether the path's losses of data packets are exactly what
// CREM restored and RDMA retransmitted, or what the difference is. The JSON names are
// `crem lab --json`'s.
type Verdict struct {
	// Verified: every run verified every byte. NotVerified names the runs that did not (with
	// their error), Interrupted the runs cut short and NotRun the configurations never started.
	Verified    bool     `json:"verified"`
	NotVerified []string `json:"not_verified,omitempty"`
	Interrupted []string `json:"interrupted,omitempty"`
	NotRun      []string `json:"not_run,omitempty"`
	// Speedup compares crem+tcaeth with gbn and with the best other verified configuration
	// (the lowest mean completion time); absent when either run is missing or did not verify.
	Speedup *Speedup `json:"speedup,omitempty"`
	// Accounts balance the losses of each run that verified (one cut short or failed left
	// losses that nothing made good, and retransmissions the path never carried).
	Accounts []Account `json:"accounts"`
	// Line is the verdict in one line, as `crem lab` prints it last.
	Line string `json:"line"`
}

// Speedup is crem+tcaeth's completion time against gbn's and the best other run's: each
// factor is the other's time over crem+tcaeth's (above 1: crem+tcaeth is faster).
type Speedup struct {
	Run        string  `json:"run"` // crem+tcaeth
	GBNMean    float64 `json:"gbn_mean"`
	GBNMax     float64 `json:"gbn_max"`
	BestOther  string  `json:"best_other,omitempty"`
	OtherMean  float64 `json:"other_mean,omitempty"`
	OtherMax   float64 `json:"other_max,omitempty"`
	HaveGBN    bool    `json:"-"`
	HaveOthers bool    `json:"-"`
}

// Account is one run's balance: DataLost (the path's losses of data packets) against
// Restored (by CREM) + RDMARetx (retransmitted by RDMA). When they differ, ResentDelivered
// names the retransmissions of packets the path had delivered already, and Twice what is left
// over: positive, losses made good twice (restored and retransmitted, or restored though a
// retransmission arrived); negative, losses made good by neither.
// OtherLost counts the path's losses of other datagrams (ACKs, NAKs, READ requests, CREM
// messages), which nothing restores or retransmits as such.
type Account struct {
	Run             string `json:"run"`
	DataLost        uint64 `json:"data_lost"`
	Restored        uint64 `json:"restored"`
	RDMARetx        uint64 `json:"rdma_retx"`
	Balanced        bool   `json:"balanced"`
	ResentDelivered uint64 `json:"resent_delivered,omitempty"`
	Twice           int64  `json:"twice,omitempty"`
	OtherLost       uint64 `json:"other_lost"`
}

// Judge computes the verdict of a lab from its runs' counts.
func Judge(res Result) Verdict {
	v := Verdict{Verified: len(res.Runs) > 0 && !res.Interrupted && len(res.NotRun) == 0, NotRun: res.NotRun}
	byName := map[string]Run{}
	for _, r := range res.Runs {
		byName[r.Name] = r
		switch {
		case r.Interrupted:
			v.Verified = false
			v.Interrupted = append(v.Interrupted, r.Name)
			if r.Error != "" {
				v.NotVerified = append(v.NotVerified, r.Name)
			}
		case !r.Verified:
			v.Verified = false
			v.NotVerified = append(v.NotVerified, r.Name)
		}
		if r.Verified { // a run cut short or failed has losses never made good: no balance
			v.Accounts = append(v.Accounts, account(r))
		}
	}
	if c, ok := byName["crem+tcaeth"]; ok && c.Verified && c.MeanS > 0 && c.MaxS > 0 {
		sp := Speedup{Run: c.Name}
		if g, ok := byName["gbn"]; ok && g.Verified {
			sp.HaveGBN, sp.GBNMean, sp.GBNMax = true, g.MeanS/c.MeanS, g.MaxS/c.MaxS
		}
		var best *Run
		for i, r := range res.Runs {
			if r.Name == c.Name || !r.Verified || r.MeanS <= 0 {
				continue
			}
			if best == nil || r.MeanS < best.MeanS {
				best = &res.Runs[i]
			}
		}
		if best != nil {
			sp.HaveOthers, sp.BestOther, sp.OtherMean, sp.OtherMax = true, best.Name, best.MeanS/c.MeanS, best.MaxS/c.MaxS
		}
		if sp.HaveGBN || sp.HaveOthers {
			v.Speedup = &sp
		}
	}
	v.Line = v.line(byName)
	return v
}

// account balances one run's losses.
func account(r Run) Account {
	a := Account{Run: r.Name, DataLost: r.DataLost, Restored: r.Restored, RDMARetx: r.RDMARetx}
	if r.Lost > r.DataLost {
		a.OtherLost = r.Lost - r.DataLost
	}
	made := int64(r.Restored + r.RDMARetx)
	excess := made - int64(r.DataLost)
	a.Balanced = excess == 0
	if excess != 0 {
		a.ResentDelivered = min(r.ResentDelivered, uint64(max(excess, 0)))
		a.Twice = excess - int64(a.ResentDelivered)
	}
	return a
}

// String is the account as an equation: lost = restored + retransmitted, and the named
// difference.
func (a Account) String() string {
	s := fmt.Sprintf("%s %d = %d + %d", a.Run, a.DataLost, a.Restored, a.RDMARetx)
	if a.ResentDelivered > 0 {
		s += fmt.Sprintf(" - %d resent though delivered", a.ResentDelivered)
	}
	switch {
	case a.Twice > 0:
		s += fmt.Sprintf(" - %d made good twice", a.Twice)
	case a.Twice < 0:
		s += fmt.Sprintf(" + %d made good by neither", -a.Twice)
	}
	return s
}

// factor says a ratio of the other's time over crem+tcaeth's: "6.2x faster", "1.3x slower",
// with two decimals near 1 ("1.03x faster", not "1.0x").
func factor(x float64) string {
	word := "faster"
	if x < 1 {
		x, word = 1/x, "slower"
	}
	if x < 1.05 {
		return fmt.Sprintf("%.2fx %s", x, word)
	}
	return fmt.Sprintf("%.1fx %s", x, word)
}

func (v Verdict) line(byName map[string]Run) string {
	var parts []string
	switch {
	case v.Verified:
		parts = append(parts, fmt.Sprintf("every byte verified (%d runs)", len(v.Accounts)))
	default:
		var p []string
		for _, n := range v.NotVerified {
			p = append(p, fmt.Sprintf("%s did not verify (%s)", n, byName[n].Error))
		}
		for _, n := range v.Interrupted {
			r := byName[n]
			p = append(p, fmt.Sprintf("%s interrupted (%d of %d messages verified, %d in flight cancelled)", n,
				r.MessagesVerified, r.Messages, r.Cancelled))
		}
		if len(v.NotRun) > 0 {
			p = append(p, "not run: "+strings.Join(v.NotRun, ", "))
		}
		verified := 0
		for _, r := range byName {
			if r.Verified {
				verified++
			}
		}
		parts = append(parts, fmt.Sprintf("%d of %d runs verified every byte; %s", verified, len(byName)+len(v.NotRun), strings.Join(p, "; ")))
	}
	if sp := v.Speedup; sp != nil {
		var p []string
		if sp.HaveGBN {
			p = append(p, fmt.Sprintf("%s than gbn in mean, %s in max", factor(sp.GBNMean), factor(sp.GBNMax)))
		}
		if sp.HaveOthers && sp.BestOther != "gbn" {
			p = append(p, fmt.Sprintf("against the best other, %s: %s in mean, %s in max", sp.BestOther, factor(sp.OtherMean), factor(sp.OtherMax)))
		} else if sp.HaveOthers {
			p = append(p, "gbn is the best other")
		}
		parts = append(parts, sp.Run+" "+strings.Join(p, "; "))
	} else if c, ok := byName["crem+tcaeth"]; ok && c.Interrupted {
		parts = append(parts, "no comparison: crem+tcaeth was cut short")
	} else if ok {
		parts = append(parts, "no comparison: it needs crem+tcaeth and another run verified")
	}
	if len(v.Accounts) > 0 {
		var p []string
		for _, a := range v.Accounts {
			p = append(p, a.String())
		}
		parts = append(parts, "lost = restored + RDMA retx: "+strings.Join(p, "; "))
	}
	return "verdict: " + strings.Join(parts, ". ")
}
