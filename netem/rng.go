package netem

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// Streams keep the generators of one seed independent of each other, so that turning jitter on
// does not change which packets are lost, nor reordering the jitter.
const (
	streamLoss    = 0x6c6f7373 // "loss"
	streamJitter  = 0x6a697474 // "jitt"
	streamReorder = 0x72656f72 // "reor"
)

// splitmix64 spreads neighbouring seeds (1, 2, 3...) across the state space.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func seedPCG(p *rand.PCG, seed, stream uint64) {
	p.Seed(splitmix64(seed), splitmix64(seed^splitmix64(stream)))
}

// below returns a uniform integer in [0, n), n > 0, by Lemire's multiply-and-reject method.
func below(p *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(p.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(p.Uint64(), n)
		}
	}
	return hi
}

// unit returns a uniform float64 in (0, 1]: 53 random bits, never 0 (a logarithm follows).
func unit(p *rand.PCG) float64 {
	return float64(p.Uint64()>>11+1) * 0x1p-53
}

// normal draws standard normal deviates by the Box-Muller transform, two per pair of uniforms;
// it is written here rather than taken from rand.Rand so that a seed's jitter does not depend on
// the standard library's choice of algorithm.
type normal struct {
	spare    float64
	hasSpare bool
}

func (n *normal) next(p *rand.PCG) float64 {
	if n.hasSpare {
		n.hasSpare = false
		return n.spare
	}
	radius := math.Sqrt(-2 * math.Log(unit(p)))
	sin, cos := math.Sincos(2 * math.Pi * unit(p))
	n.spare, n.hasSpare = radius*sin, true
	return radius * cos
}

// chance is a probability compared against one 64-bit draw. Certain and impossible events draw
// nothing, so they cost nothing and leave the generator's sequence untouched.
type chance struct {
	thr    uint64 // hit when the draw is below thr
	always bool
}

func newChance(p float64) chance {
	switch {
	case !(p > 0):
		return chance{}
	case p >= 1:
		return chance{always: true}
	}
	f := math.Ldexp(p, 64)
	if f >= math.Ldexp(1, 64) {
		return chance{always: true}
	}
	return chance{thr: uint64(f)}
}

func (c chance) hit(p *rand.PCG) bool {
	if c.always {
		return true
	}
	if c.thr == 0 {
		return false
	}
	return p.Uint64() < c.thr
}
