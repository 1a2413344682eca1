package netem

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/crem-project/crem/units"
)

// LossSpec is a parsed, validated loss specification: it builds any number of models, one per
// seed, so a sweep checks the user's text once and then runs many trials. The zero LossSpec is
// "none".
type LossSpec struct {
	kind  string // "", "bernoulli", "gilbert", "gilbert-burst", "every", "script"
	p, r  float64
	h, k  float64
	rate  float64
	burst float64
	n, of int
	drops []int
	probe LossModel // built with seed 0 at parse time: validates, and answers String and MeanLoss
}

// ParseLossModel parses a loss specification (see the package documentation) and builds its
// model with the given seed.
func ParseLossModel(spec string, seed uint64) (LossModel, error) {
	s, err := ParseLossSpec(spec)
	if err != nil {
		return nil, err
	}
	return s.New(seed), nil
}

// ParseLossSpec parses a loss specification such as "none", "0.01", "bernoulli:1%",
// "gilbert:p=0.001,r=0.25", "gilbert-burst:rate=0.01,burst=4", "every:n=1,of=1000" or
// "script:3,17,18" (see the package documentation).
func ParseLossSpec(spec string) (LossSpec, error) {
	s, err := parseLossSpec(strings.TrimSpace(spec))
	if err != nil {
		return LossSpec{}, fmt.Errorf("loss model %q: %w", spec, err)
	}
	return s, nil
}

func parseLossSpec(spec string) (LossSpec, error) {
	kind, args, hasArgs := strings.Cut(spec, ":")
	kind = strings.ToLower(strings.TrimSpace(kind))
	var s LossSpec
	switch kind {
	case "":
		return s, errors.New("empty (want none, a fraction such as 0.01, bernoulli:, gilbert:, gilbert-burst:, every: or script:)")
	case "none":
		if hasArgs && strings.TrimSpace(args) != "" {
			return s, errors.New("none takes no parameters")
		}
		return s, nil
	case "bernoulli":
		s.kind = kind
		a := strings.TrimSpace(args)
		if v, ok := strings.CutPrefix(a, "p="); ok {
			a = v
		}
		p, err := units.ParseFraction(a)
		if err != nil {
			return s, err
		}
		s.p = p
	case "gilbert", "gilbert-elliott":
		s.kind = "gilbert"
		if err := s.gilbertParams(args); err != nil {
			return s, err
		}
	case "gilbert-burst":
		s.kind = kind
		if err := s.burstParams(args); err != nil {
			return s, err
		}
	case "every":
		s.kind = kind
		if err := s.everyParams(args); err != nil {
			return s, err
		}
	case "script":
		s.kind = kind
		if err := s.scriptParams(args); err != nil {
			return s, err
		}
	default:
		if hasArgs {
			return s, fmt.Errorf("unknown kind %q (want bernoulli, gilbert, gilbert-burst, every or script)", kind)
		}
		p, err := units.ParseFraction(spec)
		if err != nil {
			return s, fmt.Errorf("neither a model name (none, bernoulli:, gilbert:, gilbert-burst:, every:, script:) nor a loss fraction: %w", err)
		}
		s.kind, s.p = "bernoulli", p
	}
	probe, err := s.build(0)
	if err != nil {
		return LossSpec{}, err
	}
	s.probe = probe
	return s, nil
}

// gilbertParams reads gilbert's parameters: p=, r=, and optional h= (1) and k= (0).
func (s *LossSpec) gilbertParams(args string) error {
	kv, err := params(args, "p", "r", "h", "k")
	if err != nil {
		return err
	}
	s.h = 1
	if err := kv.fraction("p", &s.p, true); err != nil {
		return err
	}
	if err := kv.fraction("r", &s.r, true); err != nil {
		return err
	}
	if err := kv.fraction("h", &s.h, false); err != nil {
		return err
	}
	return kv.fraction("k", &s.k, false)
}

// burstParams reads gilbert-burst's parameters: rate= and burst=.
func (s *LossSpec) burstParams(args string) error {
	kv, err := params(args, "rate", "burst")
	if err != nil {
		return err
	}
	if err := kv.fraction("rate", &s.rate, true); err != nil {
		return err
	}
	b, ok := kv["burst"]
	if !ok {
		return errors.New("missing burst= (mean loss burst in packets)")
	}
	if s.burst, err = strconv.ParseFloat(b, 64); err != nil {
		return fmt.Errorf("burst=%q is not a number", b)
	}
	return nil
}

// everyParams reads every's parameters: n= and of=.
func (s *LossSpec) everyParams(args string) error {
	kv, err := params(args, "n", "of")
	if err != nil {
		return err
	}
	if s.n, err = kv.count("n"); err != nil {
		return err
	}
	s.of, err = kv.count("of")
	return err
}

// scriptParams reads script's packet indices, comma-separated (none: an empty list).
func (s *LossSpec) scriptParams(args string) error {
	for i, f := range strings.Split(args, ",") {
		f = strings.TrimSpace(f)
		if f == "" && strings.TrimSpace(args) == "" {
			break
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return fmt.Errorf("item %d, %q, is not a packet index (0, 1, 2...)", i+1, f)
		}
		s.drops = append(s.drops, v)
	}
	return nil
}

// New builds the specified model with the given seed.
func (s LossSpec) New(seed uint64) LossModel {
	m, err := s.build(seed)
	if err != nil {
		// Only a LossSpec that ParseLossSpec returned, or the zero one, can exist.
		panic("netem: LossSpec built outside ParseLossSpec: " + err.Error())
	}
	return m
}

func (s LossSpec) build(seed uint64) (LossModel, error) {
	switch s.kind {
	case "bernoulli":
		return NewBernoulli(s.p, seed)
	case "gilbert":
		return NewGilbert(s.p, s.r, s.h, s.k, seed)
	case "gilbert-burst":
		return NewGilbertBurst(s.rate, s.burst, seed)
	case "every":
		return NewEvery(s.n, s.of, seed)
	case "script":
		return NewScript(s.drops)
	default:
		return None{}, nil
	}
}

// String is the specification in canonical form; ParseLossSpec reads it back to the same models.
func (s LossSpec) String() string {
	if s.probe == nil {
		return "none"
	}
	return s.probe.String()
}

// MeanLoss is the long-run loss probability of the specified model.
func (s LossSpec) MeanLoss() float64 {
	if s.probe == nil {
		return 0
	}
	return s.probe.MeanLoss()
}

// Set parses v, so that a *LossSpec serves as a flag.Value.
func (s *LossSpec) Set(v string) error {
	x, err := ParseLossSpec(v)
	if err != nil {
		return err
	}
	*s = x
	return nil
}

// kv holds a specification's name=value parameters.
type kv map[string]string

func params(args string, allowed ...string) (kv, error) {
	m := kv{}
	if strings.TrimSpace(args) == "" {
		return m, nil
	}
	for _, f := range strings.Split(args, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("parameter %q is not name=value", f)
		}
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, fmt.Errorf("unknown parameter %q (want %s)", k, strings.Join(allowed, ", "))
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("parameter %q given twice", k)
		}
		m[k] = v
	}
	return m, nil
}

func (m kv) fraction(name string, dst *float64, required bool) error {
	v, ok := m[name]
	if !ok {
		if required {
			return fmt.Errorf("missing %s=", name)
		}
		return nil
	}
	f, err := units.ParseFraction(v)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	*dst = f
	return nil
}

func (m kv) count(name string) (int, error) {
	v, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("missing %s=", name)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q is not a count (0, 1, 2...)", name, v)
	}
	return n, nil
}
