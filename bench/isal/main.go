// Command isal measures crem's erasure codec (package fec) beside Intel's ISA-L erasure code on
// the shapes of a CREM block over RoCEv2: k = 32 sources, m = 4 and 8 repair symbols, symbols
// of T = 1058 and 4130 octets (MTUs 1024 and 4096). It links ISA-L through cgo, so it is a
// module of its own: the crem module itself stays free of cgo. See README.md.
//
// Every variant is checked first: crem's repair symbols on each path against ISA-L's scalar
// reference over crem's Cauchy rows, ISA-L's parity on each of its kernel families against its
// reference, and every loss pattern restored by each side. Then each variant is warmed up and
// measured once per round, the rounds interleaved, on one thread (GOMAXPROCS=1), and the tables
// of throughput (source octets k x T per operation) and of ratios crem / ISA-L are printed as
// Markdown.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/psn"
)

func main() {
	rounds := flag.Int("rounds", 9, "interleaved measurement rounds")
	per := flag.Duration("time", 100*time.Millisecond, "duration of one measurement of one variant")
	npat := flag.Int("patterns", 16, "loss patterns the decodes cycle through")
	checkOnly := flag.Bool("check", false, "only check the round trips")
	flag.Parse()
	if err := run(os.Stdout, os.Stderr, *rounds, *per, *npat, *checkOnly); err != nil {
		fmt.Fprintln(os.Stderr, "isal:", err)
		os.Exit(1)
	}
}

// shapes of the measured cases.
var (
	benchK  = 32
	benchMs = []int{4, 8} // repair symbols of an encode, lost sources of a decode
	benchTs = []int{1058, 4130}
)

// cremPaths are the families of crem's kernels this build runs on this processor.
func cremPaths() []fec.Kernels {
	var out []fec.Kernels
	for _, k := range []fec.Kernels{fec.KernelsGFNI, fec.KernelsNibble, fec.KernelsPortable} {
		if k.Available() {
			out = append(out, k)
		}
	}
	return out
}

func run(out, progress io.Writer, rounds int, per time.Duration, npat int, checkOnly bool) error {
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a arena
	defer a.free()
	paths := cremPaths()
	cases, err := buildCases(&a, paths, npat)
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "round trips checked: %d cases, crem paths %s, %d loss patterns\n", len(cases), strings.Join(pathNames(paths), ", "), npat)
	if checkOnly {
		return nil
	}
	load0 := loadAvg()
	for _, c := range cases {
		for _, v := range c.variants {
			if err := v.calibrate(per); err != nil {
				return fmt.Errorf("%s warm-up: %w", c.name, err)
			}
		}
	}
	if err := runRounds(cases, rounds, progress); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s, %s/%s, GOMAXPROCS=%d, %d rounds of %v per variant, %d loss patterns\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), rounds, per, npat)
	fmt.Fprintf(out, "CPU: %s; flags: %s\n\n", cpuInfo("model name"), cpuFlags("avx2", "avx512f", "avx512bw", "avx512vl", "gfni"))
	fmt.Fprintf(out, "fec.CodecPath(): %s; load average %s before, %s after\n\n", fec.CodecPath(), load0, loadAvg())
	fmt.Fprintf(out, "ISA-L %s (headers); `isal` is its dispatch: %s\n\n", isalVersion(), isalDispatchSays())
	fmt.Fprintln(out, "GB/s of source octets (k x T per operation), wall clock: median (least-most) over the rounds, then the median by the thread's CPU time:")
	fmt.Fprintln(out)
	names := append(prefixed("crem-", pathNames(paths)), "isal", "isal-avx2", "isal-base", "isal-whole")
	writeTables(out, cases, names, []string{"isal", "isal-avx2", "isal-base", "isal-whole"})
	return nil
}

// isalDispatchSays names the kernels ec_encode_data dispatches to on this processor.
func isalDispatchSays() string {
	has := cpuFlags("gfni", "avx512bw")
	switch {
	case isalDispatchGFNI() && has == "gfni, avx512bw":
		return "its AVX-512 GFNI kernels"
	case strings.Contains(has, "no avx512bw"):
		return "its AVX2 (or older) kernels"
	case isalDispatchGFNI():
		return "its AVX-512 kernels (no GFNI here)"
	default:
		return "its AVX-512 kernels (this ISA-L has no GFNI kernels)"
	}
}

func pathNames(paths []fec.Kernels) []string {
	out := make([]string, len(paths))
	for i, k := range paths {
		out[i] = k.Name()
	}
	return out
}

// buildCases sets up and checks every case.
func buildCases(a *arena, paths []fec.Kernels, npat int) ([]*benchCase, error) {
	var encs, decs []*benchCase
	for _, m := range benchMs {
		for _, T := range benchTs {
			b, err := newBlock(a, benchK, m, T)
			if err != nil {
				return nil, err
			}
			if err := checkEncode(a, b, paths); err != nil {
				return nil, fmt.Errorf("encode k%dm%dT%d: %w", b.k, m, T, err)
			}
			c, err := encodeCase(a, b, paths)
			if err != nil {
				return nil, err
			}
			encs = append(encs, c)
			s, err := newDecodeSet(a, b, m, npat)
			if err != nil {
				return nil, err
			}
			if err := s.checkDecode(paths); err != nil {
				return nil, fmt.Errorf("decode k%du%dT%d: %w", b.k, m, T, err)
			}
			c, err = decodeCase(s, paths)
			if err != nil {
				return nil, err
			}
			decs = append(decs, c)
		}
	}
	return append(encs, decs...), nil
}

// encodeCase: crem's Encode of the m repair symbols over the whole block, as csf calls it,
// against ISA-L's ec_encode_data on tables made beforehand by ec_init_tables.
func encodeCase(a *arena, b *block, paths []fec.Kernels) (*benchCase, error) {
	c := &benchCase{name: fmt.Sprintf("encode k%dm%dT%d", b.k, b.m, b.T), bytes: b.k * b.T}
	idx := firstN(b.m)
	for _, kern := range paths {
		enc, err := fec.NewEncoder(fec.WithKernels(kern))
		if err != nil {
			return nil, fmt.Errorf("crem %s: %w", kern.Name(), err)
		}
		dst := make([][]byte, b.m)
		for i := range dst {
			dst[i] = make([]byte, b.T)
		}
		all := psn.FirstK(b.k)
		c.variants = append(c.variants, &variant{name: "crem-" + kern.Name(), run: func(n int) error {
			for range n {
				if err := enc.Encode(dst, idx, all, b.syms); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	out := a.pointers(b.m, a.buffers(b.m, b.T))
	c.variants = append(c.variants,
		&variant{name: "isal", run: func(n int) error {
			encodeLoop(n, isalDispatch, b.T, b.k, b.m, b.tbls[isalDispatch], b.blocks, out)
			return nil
		}},
		&variant{name: "isal-avx2", run: func(n int) error {
			encodeLoop(n, isalAVX2, b.T, b.k, b.m, b.tbls[isalAVX2], b.blocks, out)
			return nil
		}},
		&variant{name: "isal-base", run: func(n int) error {
			encodeLoop(n, isalBase, b.T, b.k, b.m, b.tbls[isalBase], b.blocks, out)
			return nil
		}})
	return c, nil
}

// decodeCase: crem's whole decode of u lost sources (Reset, the survivors by reference, the u
// repair symbols, the solve) against ISA-L's decode kernels on tables prepared beforehand per
// loss pattern, and ISA-L's whole decode (gf_invert_matrix, ec_init_tables, ec_encode_data).
func decodeCase(s *decodeSet, paths []fec.Kernels) (*benchCase, error) {
	b := s.b
	npat := len(s.pats)
	c := &benchCase{name: fmt.Sprintf("decode k%du%dT%d", b.k, s.u, b.T), bytes: b.k * b.T}
	for _, kern := range paths {
		d, err := fec.NewDecoder(fec.WithKernels(kern))
		if err != nil {
			return nil, fmt.Errorf("crem %s: %w", kern.Name(), err)
		}
		p := 0
		c.variants = append(c.variants, &variant{name: "crem-" + kern.Name(), run: func(n int) error {
			for range n {
				if err := s.cremDecode(d, p); err != nil {
					return err
				}
				p = (p + 1) % npat
			}
			return nil
		}})
	}
	pk, pa, pb, pw := 0, 0, 0, 0
	c.variants = append(c.variants,
		&variant{name: "isal", run: func(n int) error {
			decodeKernelLoop(n, pk, isalDispatch, b.T, b.k, s.u, npat, s.tbls[isalDispatch], s.srcs, s.outP)
			pk = (pk + n) % npat
			return nil
		}},
		&variant{name: "isal-avx2", run: func(n int) error {
			decodeKernelLoop(n, pa, isalAVX2, b.T, b.k, s.u, npat, s.tbls[isalAVX2], s.srcs, s.outP)
			pa = (pa + n) % npat
			return nil
		}},
		&variant{name: "isal-base", run: func(n int) error {
			decodeKernelLoop(n, pb, isalBase, b.T, b.k, s.u, npat, s.tbls[isalBase], s.srcs, s.outP)
			pb = (pb + n) % npat
			return nil
		}},
		&variant{name: "isal-whole", run: func(n int) error {
			err := decodeFullLoop(n, pw, isalDispatch, b.T, b.k, b.m, s.u, npat, b.encmat, s.lost, b.blocks, s.outP)
			pw = (pw + n) % npat
			return err
		}})
	return c, nil
}

// cpuInfo is the first value of field in /proc/cpuinfo.
func cpuInfo(field string) string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == field {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// cpuFlags says which of the flags /proc/cpuinfo lists.
func cpuFlags(names ...string) string {
	have := map[string]bool{}
	for _, f := range strings.Fields(cpuInfo("flags")) {
		have[f] = true
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if !have[n] {
			out[i] = "no " + n
		}
	}
	return strings.Join(out, ", ")
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
