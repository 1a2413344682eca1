package netem

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/crem-project/crem/units"
)

// LossModel decides, packet by packet, which packets a path loses. The i-th call to Drop decides
// packet i (counting from 0) of the packets offered to the model; a model is deterministic for
// its seed and keeps its own generator.
type LossModel interface {
	// Drop reports whether the next packet is lost.
	Drop() bool
	// MeanLoss is the model's long-run loss probability.
	MeanLoss() float64
	// String is the model's specification, which ParseLossSpec reads back.
	String() string
}

// None loses nothing.
type None struct{}

func (None) Drop() bool        { return false }
func (None) MeanLoss() float64 { return 0 }
func (None) String() string    { return "none" }

// Bernoulli loses each packet independently with probability P.
type Bernoulli struct {
	p    float64
	c    chance
	rand rand.PCG
}

// NewBernoulli returns a Bernoulli loss model with loss probability p in [0, 1].
func NewBernoulli(p float64, seed uint64) (*Bernoulli, error) {
	if err := checkProb("p", p); err != nil {
		return nil, fmt.Errorf("bernoulli loss: %w", err)
	}
	b := &Bernoulli{p: p, c: newChance(p)}
	seedPCG(&b.rand, seed, streamLoss)
	return b, nil
}

func (b *Bernoulli) Drop() bool        { return b.c.hit(&b.rand) }
func (b *Bernoulli) MeanLoss() float64 { return b.p }
func (b *Bernoulli) String() string    { return "bernoulli:" + units.FormatFraction(b.p) }

// Gilbert is the Gilbert-Elliott two-state loss model (see the package documentation).
type Gilbert struct {
	p, r, h, k float64
	burst      float64 // > 0 when built from a rate and a mean burst length, for String
	rate       float64
	toBad      chance
	toGood     chance
	lossGood   chance
	lossBad    chance
	bad        bool
	rand       rand.PCG
}

// NewGilbert returns a Gilbert-Elliott model: p is the probability of moving from the good to the
// bad state, r from bad to good, h the loss probability in the bad state and k in the good state.
// p + r must be positive.
func NewGilbert(p, r, h, k float64, seed uint64) (*Gilbert, error) {
	for _, x := range []struct {
		name string
		v    float64
	}{{"p", p}, {"r", r}, {"h", h}, {"k", k}} {
		if err := checkProb(x.name, x.v); err != nil {
			return nil, fmt.Errorf("gilbert loss: %w", err)
		}
	}
	if p+r == 0 {
		return nil, fmt.Errorf("gilbert loss: p and r are both 0, so the chain never moves and has no mean")
	}
	g := &Gilbert{p: p, r: r, h: h, k: k,
		toBad: newChance(p), toGood: newChance(r), lossGood: newChance(k), lossBad: newChance(h)}
	seedPCG(&g.rand, seed, streamLoss)
	// Start in the stationary distribution, so the mean holds from the first packet.
	g.bad = newChance(p / (p + r)).hit(&g.rand)
	return g, nil
}

// NewGilbertBurst returns the Gilbert-Elliott model with h = 1 and k = 0 whose mean loss is rate
// and whose mean loss burst is burst packets: r = 1/burst and p = rate/(burst*(1-rate)). It needs
// burst >= 1 and rate <= burst/(burst+1), where p reaches 1.
func NewGilbertBurst(rate, burst float64, seed uint64) (*Gilbert, error) {
	if err := checkProb("rate", rate); err != nil {
		return nil, fmt.Errorf("gilbert-burst loss: %w", err)
	}
	if !(burst >= 1) || burst > 1e12 {
		return nil, fmt.Errorf("gilbert-burst loss: burst %v is not between 1 and 1e12 packets", burst)
	}
	if rate == 1 {
		return nil, fmt.Errorf("gilbert-burst loss: rate 1 leaves no good state")
	}
	r := 1 / burst
	p := rate / (burst * (1 - rate))
	if p > 1+1e-12 {
		return nil, fmt.Errorf("gilbert-burst loss: rate %v is too high for mean burst %v (at most %v)",
			rate, burst, burst/(burst+1))
	}
	p = min(p, 1) // rounding at the limit
	g, err := NewGilbert(p, r, 1, 0, seed)
	if err != nil {
		return nil, err
	}
	g.rate, g.burst = rate, burst
	return g, nil
}

func (g *Gilbert) Drop() bool {
	var lost bool
	if g.bad {
		lost = g.lossBad.hit(&g.rand)
		g.bad = !g.toGood.hit(&g.rand)
	} else {
		lost = g.lossGood.hit(&g.rand)
		g.bad = g.toBad.hit(&g.rand)
	}
	return lost
}

// MeanLoss is (h*p + k*r)/(p + r).
func (g *Gilbert) MeanLoss() float64 { return (g.h*g.p + g.k*g.r) / (g.p + g.r) }

// Params returns the chain's p, r, h and k.
func (g *Gilbert) Params() (p, r, h, k float64) { return g.p, g.r, g.h, g.k }

func (g *Gilbert) String() string {
	if g.burst > 0 {
		return "gilbert-burst:rate=" + units.FormatFraction(g.rate) + ",burst=" + formatFloat(g.burst)
	}
	s := "gilbert:p=" + units.FormatFraction(g.p) + ",r=" + units.FormatFraction(g.r)
	if g.h != 1 {
		s += ",h=" + units.FormatFraction(g.h)
	}
	if g.k != 0 {
		s += ",k=" + units.FormatFraction(g.k)
	}
	return s
}

// MaxEveryWindow bounds N in "n of every N": the model keeps one bit per position of a window.
const MaxEveryWindow = 1 << 26

// Every loses exactly n packets in every consecutive window of N packets (packets 0..N-1,
// N..2N-1, ...), at positions drawn afresh for each window from its seed.
type Every struct {
	n, of int
	pos   int
	marks []uint64 // the window's lost positions; each bit is cleared as it is read
	rand  rand.PCG
}

// NewEvery returns the model that loses exactly n of every of packets, 0 <= n <= of <=
// MaxEveryWindow.
func NewEvery(n, of int, seed uint64) (*Every, error) {
	if of < 1 || of > MaxEveryWindow {
		return nil, fmt.Errorf("every loss: window of=%d is not between 1 and %d", of, MaxEveryWindow)
	}
	if n < 0 || n > of {
		return nil, fmt.Errorf("every loss: n=%d is not between 0 and of=%d", n, of)
	}
	e := &Every{n: n, of: of, marks: make([]uint64, (of+63)/64)}
	seedPCG(&e.rand, seed, streamLoss)
	return e, nil
}

func (e *Every) Drop() bool {
	if e.pos == 0 {
		e.draw()
	}
	w, b := e.pos>>6, uint64(1)<<(e.pos&63)
	lost := e.marks[w]&b != 0
	e.marks[w] &^= b
	if e.pos++; e.pos == e.of {
		e.pos = 0
	}
	return lost
}

// draw marks n distinct positions of the window, uniformly (Floyd's sampling: n draws, no
// rejection, no list of the window).
func (e *Every) draw() {
	for j := e.of - e.n; j < e.of; j++ {
		t := int(below(&e.rand, uint64(j+1)))
		if e.marks[t>>6]&(1<<(t&63)) != 0 {
			t = j
		}
		e.marks[t>>6] |= 1 << (t & 63)
	}
}

func (e *Every) MeanLoss() float64 { return float64(e.n) / float64(e.of) }

func (e *Every) String() string { return "every:n=" + strconv.Itoa(e.n) + ",of=" + strconv.Itoa(e.of) }

// Script loses exactly the listed packet indices (0-based) and nothing else.
type Script struct {
	drops []int
	next  int // index into drops of the next loss
	i     int // index of the next packet
}

// NewScript returns the model that loses the given packet indices; the list is copied, sorted and
// deduplicated, and must not contain negative indices.
func NewScript(indices []int) (*Script, error) {
	d := slices.Clone(indices)
	slices.Sort(d)
	d = slices.Compact(d)
	if len(d) > 0 && d[0] < 0 {
		return nil, fmt.Errorf("script loss: negative packet index %d", d[0])
	}
	return &Script{drops: d}, nil
}

func (s *Script) Drop() bool {
	lost := s.next < len(s.drops) && s.drops[s.next] == s.i
	if lost {
		s.next++
	}
	s.i++
	return lost
}

// MeanLoss is the share of lost packets among packets 0 to the last listed index: the script
// says nothing about packets after it.
func (s *Script) MeanLoss() float64 {
	if len(s.drops) == 0 {
		return 0
	}
	return float64(len(s.drops)) / float64(s.drops[len(s.drops)-1]+1)
}

func (s *Script) String() string {
	var b strings.Builder
	b.WriteString("script:")
	for i, d := range s.drops {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(d))
	}
	return b.String()
}

func checkProb(name string, p float64) error {
	if !(p >= 0 && p <= 1) {
		return fmt.Errorf("%s=%v is not a probability in [0, 1]", name, p)
	}
	return nil
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
