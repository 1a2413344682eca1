package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/crem-project/crem/rc"
)

// Scheme is what runs on a connection: an rc reliability mode and, for the CREM schemes, the
// CREM engines beside the QPs with a policy.
type Scheme struct {
	Name  string
	Mode  rc.Mode
	NoNAK bool // sr: recover by per-packet timeout only
	// CREM is the CREM policy, or "" for a plain rc scheme.
	CREM string
	// Hold is the in-order hold of RULINGS C7(a) in the CREM receiver (CREM over gbn).
	Hold bool
	// ReporterAt, when positive, puts a path reporter on both links at this fraction of the
	// one-way propagation delay (0.5: the middle), and the CSF accepts its reports (S19).
	ReporterAt float64
}

// The CREM policies a scheme may name.
const (
	PolicyFixed = "fixed" // adaptation off, k = 32, m = 8 (the setting SDR-RDMA picked)
	PolicyDraft = "draft" // the draft's recommendation: epsilon = 1e-4 per block, k = 32
	PolicyBest  = "best"  // the project's policy: k and m chosen per message, extra ordinary repair (C16)
)

// Schemes lists every scheme in report order.
func Schemes() []Scheme {
	return []Scheme{
		{Name: "gbn", Mode: rc.ModeGBN},
		{Name: "sr-rto", Mode: rc.ModeSR, NoNAK: true},
		{Name: "sr-nack", Mode: rc.ModeSR},
		{Name: "tcaeth", Mode: rc.ModeTCAETH},
		{Name: "ec", Mode: rc.ModeTCAETH, CREM: PolicyFixed},
		{Name: "crem-draft+tcaeth", Mode: rc.ModeTCAETH, CREM: PolicyDraft},
		{Name: "crem+tcaeth", Mode: rc.ModeTCAETH, CREM: PolicyBest},
		{Name: "crem", Mode: rc.ModeGBN, CREM: PolicyBest, Hold: true},
		{Name: "crem+tcaeth+reporter", Mode: rc.ModeTCAETH, CREM: PolicyBest, ReporterAt: 0.5},
	}
}

// SchemeNames returns the names of every scheme.
func SchemeNames() []string {
	var n []string
	for _, s := range Schemes() {
		n = append(n, s.Name)
	}
	return n
}

// LookupScheme returns the scheme called name.
func LookupScheme(name string) (Scheme, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, s := range Schemes() {
		if s.Name == name {
			return s, nil
		}
	}
	return Scheme{}, fmt.Errorf("sim: unknown scheme %q (want one of %s)", name, strings.Join(SchemeNames(), ", "))
}

// ParseSchemes reads a comma-separated list of scheme names, or "all".
func ParseSchemes(list string) ([]Scheme, error) {
	if strings.TrimSpace(list) == "" || strings.EqualFold(strings.TrimSpace(list), "all") {
		return Schemes(), nil
	}
	var out []Scheme
	var names []string
	for _, f := range strings.Split(list, ",") {
		s, err := LookupScheme(f)
		if err != nil {
			return nil, err
		}
		if slices.Contains(names, s.Name) {
			return nil, fmt.Errorf("sim: scheme %q named twice", s.Name)
		}
		names = append(names, s.Name)
		out = append(out, s)
	}
	return out, nil
}
