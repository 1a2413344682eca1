package main

import "C"

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/psn"
)

// block is one block of k random source symbols of T octets and its repair: crem's (its
// Cauchy rows) and ISA-L's (gf_gen_cauchy1_matrix). The symbols are C memory, read by both.
type block struct {
	k, m, T  int
	syms     [][]byte                // k source symbols
	payloads [][]byte                // their payloads, syms[j][2:]
	repair   [][]byte                // crem's repair symbols 0..m-1
	parity   [][]byte                // ISA-L's parity blocks
	encmat   []byte                  // ISA-L's (k+m) x k matrix
	tbls     [isalFamilyCount][]byte // ISA-L's encode tables, per kernel family
	blocks   **C.uchar
	parityP  **C.uchar
}

func newBlock(a *arena, k, m, T int) (*block, error) {
	if k > maxK || m > maxK {
		return nil, fmt.Errorf("k %d, m %d: the helpers take at most %d", k, m, maxK)
	}
	rng := rand.New(rand.NewPCG(uint64(k*1000+m), uint64(T)))
	b := &block{k: k, m: m, T: T}
	b.syms = a.buffers(k, T)
	for j := range b.syms {
		p := make([]byte, T-2)
		for n := range p {
			p[n] = byte(rng.Uint32())
		}
		s, err := fec.AppendSymbol(nil, p, T)
		if err != nil {
			return nil, fmt.Errorf("source symbol %d: %w", j, err)
		}
		copy(b.syms[j], s)
		b.payloads = append(b.payloads, b.syms[j][2:])
	}
	enc, err := fec.NewEncoder()
	if err != nil {
		return nil, fmt.Errorf("crem encoder: %w", err)
	}
	b.repair = make([][]byte, m)
	for i := range b.repair {
		b.repair[i] = make([]byte, T)
	}
	if err := enc.Encode(b.repair, firstN(m), psn.FirstK(k), b.syms); err != nil {
		return nil, fmt.Errorf("crem encode: %w", err)
	}
	b.parity = a.buffers(m, T)
	b.encmat = cauchyMatrix(a, k, m)
	for _, kernel := range isalFamilies {
		b.tbls[kernel] = initTables(a, kernel, k, m, b.encmat[k*k:])
	}
	b.blocks = a.pointers(k+m, append(slices.Clone(b.syms), b.parity...))
	b.parityP = a.pointers(m, b.parity)
	encodeLoop(1, isalDispatch, T, k, m, b.tbls[isalDispatch], b.blocks, b.parityP)
	return b, nil
}

// isalFamilies are ISA-L's kernel families, each measured and checked.
var isalFamilies = []C.int{isalDispatch, isalAVX2, isalBase}

func firstN(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// lossPatterns returns n seeded sets of u lost sources out of k, each in increasing order.
func lossPatterns(k, u, n int) [][]int {
	rng := rand.New(rand.NewPCG(uint64(k*u), 7))
	out := make([][]int, n)
	for p := range out {
		out[p] = rng.Perm(k)[:u]
		slices.Sort(out[p])
	}
	return out
}

// checkEncode holds every encoder against the others: crem on each path gives the repair
// symbols of its Cauchy rows, which ISA-L's scalar ec_encode_data_base computes from the same
// rows too; ISA-L's parity is the same from its dispatched and AVX2 kernels and from its scalar
// reference.
func checkEncode(a *arena, b *block, paths []fec.Kernels) error {
	idx := firstN(b.m)
	for _, kern := range paths {
		enc, err := fec.NewEncoder(fec.WithKernels(kern))
		if err != nil {
			return fmt.Errorf("crem %s: %w", kern.Name(), err)
		}
		dst := a.buffers(b.m, b.T)
		if err := enc.Encode(dst, idx, psn.FirstK(b.k), b.syms); err != nil {
			return fmt.Errorf("crem %s encode: %w", kern.Name(), err)
		}
		for i := range dst {
			if !bytes.Equal(dst[i], b.repair[i]) {
				return fmt.Errorf("crem %s: repair %d differs from the default path's", kern.Name(), i)
			}
		}
	}
	rows, err := fec.CauchyRows(b.k, idx...)
	if err != nil {
		return fmt.Errorf("crem rows: %w", err)
	}
	coef := a.bytes(b.m * b.k)
	for i, r := range rows {
		copy(coef[i*b.k:], r)
	}
	ref := a.buffers(b.m, b.T)
	encodeBase(b.T, b.k, b.m, initTables(a, isalBase, b.k, b.m, coef), b.blocks, a.pointers(b.m, ref))
	for i := range ref {
		if !bytes.Equal(ref[i], b.repair[i]) {
			return fmt.Errorf("crem repair %d differs from ISA-L's ec_encode_data_base over crem's rows", i)
		}
	}
	refP := a.buffers(b.m, b.T)
	encodeBase(b.T, b.k, b.m, b.tbls[isalBase], b.blocks, a.pointers(b.m, refP))
	for _, kernel := range isalFamilies {
		got := a.buffers(b.m, b.T)
		encodeLoop(1, kernel, b.T, b.k, b.m, b.tbls[kernel], b.blocks, a.pointers(b.m, got))
		for i := range got {
			if !bytes.Equal(got[i], refP[i]) {
				return fmt.Errorf("ISA-L kernels %d: parity %d differs from ec_encode_data_base", kernel, i)
			}
		}
	}
	return nil
}

// decodeSet is one block's decode of u lost sources over npat loss patterns, on both sides:
// ISA-L's tables for every pattern prepared beforehand (for the kernels alone) and the arrays
// its whole decode takes.
type decodeSet struct {
	b     *block
	u     int
	pats  [][]int
	lost  *C.int                  // the patterns, npat*u
	tbls  [isalFamilyCount][]byte // per kernel family, npat tables of 32*k*u octets
	srcs  **C.uchar               // npat*k surviving blocks
	out   [][]byte                // u restored blocks
	outP  **C.uchar
	lostB []psn.Bitmap
}

func newDecodeSet(a *arena, b *block, u, npat int) (*decodeSet, error) {
	if u > b.m || u > maxU {
		return nil, fmt.Errorf("u %d: the block has %d repair symbols, the helpers take %d", u, b.m, maxU)
	}
	s := &decodeSet{b: b, u: u, pats: lossPatterns(b.k, u, npat)}
	s.lost = a.ints(slices.Concat(s.pats...))
	for _, kernel := range isalFamilies {
		s.tbls[kernel] = a.bytes(npat * 32 * b.k * u)
	}
	s.srcs = a.pointers(npat*b.k, nil)
	s.out = a.buffers(u, b.T)
	s.outP = a.pointers(u, s.out)
	srcs := cPointers(s.srcs, npat*b.k)
	lost := cInts(s.lost, npat*u)
	for p, pat := range s.pats {
		for _, kernel := range isalFamilies {
			if err := decodePrepare(kernel, b.k, b.m, u, b.encmat, &lost[p*u], b.blocks, &srcs[p*b.k], s.tbls[kernel][p*32*b.k*u:]); err != nil {
				return nil, fmt.Errorf("pattern %v: %w", pat, err)
			}
		}
		var bm psn.Bitmap
		for _, j := range pat {
			bm.Set(j)
		}
		s.lostB = append(s.lostB, bm)
	}
	return s, nil
}

// checkDecode restores every pattern on every side and compares with the sources: ISA-L's
// kernels on the prepared tables and its whole decode, each on its dispatched and AVX2 kernels;
// crem's Decoder on each path.
func (s *decodeSet) checkDecode(paths []fec.Kernels) error {
	b := s.b
	npat := len(s.pats)
	for _, kernel := range isalFamilies {
		for p, pat := range s.pats {
			s.clearOut()
			decodeKernelLoop(1, p, kernel, b.T, b.k, s.u, npat, s.tbls[kernel], s.srcs, s.outP)
			if err := s.compare(pat, "ISA-L kernels"); err != nil {
				return err
			}
			s.clearOut()
			if err := decodeFullLoop(1, p, kernel, b.T, b.k, b.m, s.u, npat, b.encmat, s.lost, b.blocks, s.outP); err != nil {
				return err
			}
			if err := s.compare(pat, "ISA-L whole decode"); err != nil {
				return err
			}
		}
	}
	for _, kern := range paths {
		d, err := fec.NewDecoder(fec.WithKernels(kern))
		if err != nil {
			return fmt.Errorf("crem %s: %w", kern.Name(), err)
		}
		for p, pat := range s.pats {
			if err := s.cremDecode(d, p); err != nil {
				return fmt.Errorf("crem %s: %w", kern.Name(), err)
			}
			for _, j := range pat {
				got, err := d.Symbol(j)
				if err != nil {
					return fmt.Errorf("crem %s pattern %v: %w", kern.Name(), pat, err)
				}
				if !bytes.Equal(got, b.syms[j]) {
					return fmt.Errorf("crem %s pattern %v: source %d not restored", kern.Name(), pat, j)
				}
			}
		}
	}
	return nil
}

func (s *decodeSet) clearOut() {
	for _, o := range s.out {
		clear(o)
	}
}

func (s *decodeSet) compare(pat []int, what string) error {
	for e, j := range pat {
		if !bytes.Equal(s.out[e], s.b.syms[j]) {
			return fmt.Errorf("%s, pattern %v: source %d not restored", what, pat, j)
		}
	}
	return nil
}

// cremDecode is one whole decode as a receiver runs it (and as fec's BenchmarkDecode does):
// the surviving payloads by reference, the u repair symbols copied, the solve.
func (s *decodeSet) cremDecode(d *fec.Decoder, p int) error {
	b := s.b
	all := psn.FirstK(b.k)
	lost := s.lostB[p]
	if err := d.Reset(fec.SchemeCauchy, b.k, b.T, all); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	for j := range b.k {
		if !lost.Has(j) {
			if err := d.AddSourceRef(j, b.payloads[j]); err != nil {
				return fmt.Errorf("source %d: %w", j, err)
			}
		}
	}
	for i := range s.u {
		if err := d.AddRepair(i, all, b.repair[i]); err != nil {
			return fmt.Errorf("repair %d: %w", i, err)
		}
	}
	restored, err := d.Decode()
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if restored != lost {
		return fmt.Errorf("restored %v, lost %v", restored.Positions(nil), s.pats[p])
	}
	return nil
}
