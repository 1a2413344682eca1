package fec

import (
	"errors"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/crem-project/crem/psn"
)

// exhaustivePresent returns the present patterns tried for k: the full block and, from k = 3,
// one with absent positions (every third, as an RDMA READ request would leave).
func exhaustivePresent(k int) []psn.Bitmap {
	out := []psn.Bitmap{psn.FirstK(k)}
	if k >= 3 {
		var p psn.Bitmap
		for j := range k {
			if j%3 != 1 {
				p.Set(j)
			}
		}
		out = append(out, p)
	}
	return out
}

// TestEveryLossPatternUpToM: Section 4.3.1, "as many symbols as there are present sources
// recover the block": for every k <= 8, m <= 6, every pattern of at most m lost symbols among
// the present sources and the m ordinary repair symbols is restored byte-exact, whether the
// repair symbols arrive before or after the sources, and whether the sources are copied or
// held by reference.
func TestEveryLossPatternUpToM(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	enc, d := newEncoder(t), newDecoder(t)
	const T = 24
	patterns := 0
	for k := 1; k <= 8; k++ {
		for _, present := range exhaustivePresent(k) {
			pos := present.Positions(nil)
			b := newTestBlock(t, rng, k, T, present)
			for m := 1; m <= 6; m++ {
				rep := make([][]byte, m)
				for i := range m {
					rep[i] = b.repair(t, enc, i, present)
				}
				n := len(pos) + m
				for mask := range 1 << n {
					if bits.OnesCount(uint(mask)) > m {
						continue
					}
					for mode := range 4 {
						repairFirst, byRef := mode&1 == 1, mode&2 == 2
						patterns++
						if err := d.Reset(SchemeCauchy, k, T, present); err != nil {
							t.Fatal(err)
						}
						addSources := func() {
							for s, j := range pos {
								if mask&(1<<s) == 0 {
									add := d.AddSource
									if byRef {
										add = d.AddSourceRef
									}
									if err := add(j, b.payloads[j]); err != nil {
										t.Fatal(err)
									}
								}
							}
						}
						if !repairFirst {
							addSources()
						}
						for i := range m {
							if mask&(1<<(len(pos)+i)) == 0 {
								if err := d.AddRepair(i, present, rep[i]); err != nil {
									t.Fatal(err)
								}
							}
						}
						if repairFirst {
							addSources()
						}
						if _, err := d.Decode(); err != nil {
							t.Fatalf("k=%d m=%d present %v loss mask %b: %v", k, m, pos, mask, err)
						}
						b.checkRestored(t, d)
					}
				}
			}
		}
	}
	t.Logf("%d loss patterns restored", patterns)
}

// TestEveryCodedRetransmissionPattern: Sections 7.2 and 7.4 and the Appendix, for every k <= 8
// with m = 3 ordinary rows: every lost set U and every subset H of the ordinary rows held with
// |H| < |U| is completed by |U| - |H| coded retransmissions over L = U with fresh indices;
// with one of them lost the block reports exactly one missing; and when a source of U
// arrives late instead, the mix of ordinary and coded rows still restores the rest.
func TestEveryCodedRetransmissionPattern(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	enc, d := newEncoder(t), newDecoder(t)
	const T, m = 20, 3
	patterns := 0
	for k := 1; k <= 8; k++ {
		for _, present := range exhaustivePresent(k) {
			pos := present.Positions(nil)
			b := newTestBlock(t, rng, k, T, present)
			rep := make([][]byte, m)
			for i := range m {
				rep[i] = b.repair(t, enc, i, present)
			}
			for umask := 1; umask < 1<<len(pos); umask++ {
				var lost psn.Bitmap
				for s, j := range pos {
					if umask&(1<<s) != 0 {
						lost.Set(j)
					}
				}
				u := lost.Count()
				for hmask := range 1 << m {
					h := bits.OnesCount(uint(hmask))
					if h >= u {
						continue
					}
					coded := make([][]byte, u-h)
					for r := range coded {
						if m+r+k > 255 {
							t.Fatalf("index %d beyond the limit for k = %d", m+r, k)
						}
						coded[r] = b.repair(t, enc, m+r, lost)
					}
					for _, variant := range []string{"all", "one coded lost", "late source, one coded lost"} {
						patterns++
						if err := d.Reset(SchemeCauchy, k, T, present); err != nil {
							t.Fatal(err)
						}
						for _, j := range pos {
							if !lost.Has(j) {
								if err := d.AddSource(j, b.payloads[j]); err != nil {
									t.Fatal(err)
								}
							}
						}
						for i := range m {
							if hmask&(1<<i) != 0 {
								if err := d.AddRepair(i, present, rep[i]); err != nil {
									t.Fatal(err)
								}
							}
						}
						nCoded := len(coded)
						if variant != "all" {
							nCoded--
						}
						for r := range nCoded {
							if err := d.AddRepair(m+r, lost, coded[r]); err != nil {
								t.Fatal(err)
							}
						}
						switch variant {
						case "one coded lost":
							s := d.Status()
							if _, err := d.Decode(); !errors.Is(err, ErrNotSolvable) || s.Missing != 1 || s.Unknown != lost {
								t.Fatalf("k=%d U=%v H=%b %s: %v, status %+v", k, lost.Positions(nil), hmask, variant, err, s)
							}
							continue
						case "late source, one coded lost":
							late := lost.Positions(nil)[0]
							if err := d.AddSource(late, b.payloads[late]); err != nil {
								t.Fatal(err)
							}
						}
						if _, err := d.Decode(); err != nil {
							t.Fatalf("k=%d U=%v H=%b %s: %v", k, lost.Positions(nil), hmask, variant, err)
						}
						b.checkRestored(t, d)
					}
				}
			}
		}
	}
	t.Logf("%d coded retransmission patterns", patterns)
}
