package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/psn"
)

// fecAppendixInput is the Appendix's four UDP payloads, "RDMA-PKT-0".."RDMA-PKT-3", in hex.
const fecAppendixInput = `52444d412d504b542d30
52444d412d504b542d31
52444d412d504b542d32
52444d412d504b542d33`

var fecHelp = `Usage: crem fec <subcommand> [flags]

A CREM sender protects a block of k RDMA packets (k consecutive PSN positions) by sending repair
symbols beside them; a receiver that lost some packets rebuilds them from the packets it got and
the repair symbols. "crem fec" computes those repair symbols, exactly as the draft defines them.

Each packet becomes a source symbol of T octets: its UDP payload P prefixed by its length,
uint16(len(P)) || P, padded with zeros to T. Positions that carry no packet in this direction
(absent positions, e.g. the PSNs an RDMA READ request consumes) count as zero symbols.

FEC schemes:
  0  Source Copy: repair symbol i is source symbol i, unmodified (per-packet retransmission)
  1  Cauchy Reed-Solomon over GF(2^8): R_i[L] = sum over j in L of C(i, j) * S_j, with
     C(i, j) = 1/((255 - i) + j); Repair Indices i + k <= 255. An ordinary repair symbol uses
     L = all present positions, a coded retransmission only the lost ones.
  2  XOR: one repair symbol (index 0), the exclusive-or of all source symbols

Subcommands:
  encode    read one payload per position (hex lines) and print repair symbols (hex lines)

Example (the draft's Appendix: k = 4, T = 16, R0 and R1):
  printf '%s\n' 52444d412d504b542d30 52444d412d504b542d31 52444d412d504b542d32 \
      52444d412d504b542d33 | crem fec encode --scheme 1 --T 16 --m 2

Run "crem fec encode --help" for details.
`

func runFec(args []string, s stdio) int {
	if len(args) == 0 {
		fmt.Fprint(s.err, fecHelp)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(s.out, fecHelp)
		return 0
	case "encode":
		return runFecEncode(args[1:], s)
	}
	fmt.Fprintf(s.err, "crem fec: unknown subcommand %q (see crem fec --help)\n", args[0])
	return 2
}

var fecEncodeDescription = `Reads one line per block position from standard input: the UDP payload of the packet at
that position in hex (for RoCEv2, from the Base Transport Header through the ICRC), "-" for an
absent position, or an empty line for a zero-length payload. Prints one repair symbol per line
in lower-case hex, in the order of --repair (default: Repair Indices 0 to m-1).

  --scheme 1   Cauchy Reed-Solomon. --over names the set L the symbols are computed over
               (default: all present positions, i.e. ordinary repair symbols; a coded
               retransmission uses the lost positions named in the receiver's request).
               Every Repair Index i must satisfy i + k <= 255.
  --scheme 2   XOR of all present source symbols; only Repair Index 0.
  --scheme 0   Source Copy: prints the source symbols at the positions given by --repair.

k is the number of input lines unless --k says otherwise (then exactly k lines are expected).
T, the symbol length, defaults to the longest payload + 2. Lists are comma-separated and may
hold ranges: "0,1,2" or "0-2".

Exit status 0 on success; 1 with one line on standard error for bad input (bad hex, a payload
longer than T - 2, an index beyond the limit, a position out of the block or absent).

Examples, with the four payloads of the draft's Appendix ("RDMA-PKT-0".."RDMA-PKT-3") in a file
appendix.hex, one per line:
    52444d412d504b542d30
    52444d412d504b542d31
    52444d412d504b542d32
    52444d412d504b542d33

  crem fec encode --scheme 1 --T 16 --m 2 < appendix.hex
      001ef6ccd7c377f0ddfc774c00000000   (R0)
      001ef6ccd7c377f0ddfc774f00000000   (R1)
  crem fec encode --scheme 1 --T 16 --repair 2 --over 0,1,2 < appendix.hex
      00354fdf6d4b40b57e5c400000000000   (R2[L], the coded retransmission for L = {0, 1, 2})`

// fecEncodeArgs is what the flags of "crem fec encode" ask for.
type fecEncodeArgs struct {
	scheme       int
	k, T, m      int
	repair, over string
	set          map[string]bool
}

func runFecEncode(args []string, s stdio) int {
	fs := newFlagSet("fec encode", "crem fec encode --scheme S [--k K] [--T T] [--m M | --repair LIST] [--over LIST]", fecEncodeDescription, s)
	var a fecEncodeArgs
	fs.IntVar(&a.scheme, "scheme", 0, "FEC scheme: 0 Source Copy, 1 Cauchy Reed-Solomon, 2 XOR (required)")
	fs.IntVar(&a.k, "k", 0, "number of block positions (default: the number of input lines)")
	fs.IntVar(&a.T, "T", 0, "symbol length in octets (default: the longest payload + 2)")
	fs.IntVar(&a.m, "m", 1, "number of repair symbols, Repair Indices 0..m-1")
	fs.StringVar(&a.repair, "repair", "", "Repair Indices to print, in order, e.g. 2 or 0,3 or 0-3 (instead of --m)")
	fs.StringVar(&a.over, "over", "", "scheme 1: the set L of positions to code over, e.g. 0,1,2 (default: all present)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	a.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { a.set[f.Name] = true })
	if fs.NArg() > 0 {
		return fecFail(s, fmt.Errorf("unexpected argument %q (the payloads come from standard input)", fs.Arg(0)))
	}
	lines, err := fecEncode(a, s.in)
	if err != nil {
		return fecFail(s, err)
	}
	for _, l := range lines {
		fmt.Fprintln(s.out, l)
	}
	return 0
}

// fecFail prints err as one line and returns exit status 1.
func fecFail(s stdio, err error) int {
	msg := strings.TrimPrefix(err.Error(), "fec: ")
	fmt.Fprintln(s.err, "crem fec encode: "+strings.ReplaceAll(msg, "\n", " "))
	return 1
}

// fecEncode does the work of "crem fec encode" and returns the output lines.
func fecEncode(a fecEncodeArgs, in io.Reader) ([]string, error) {
	if !a.set["scheme"] {
		return nil, errors.New("--scheme is required (0 Source Copy, 1 Cauchy Reed-Solomon, 2 XOR)")
	}
	if a.scheme < 0 || a.scheme > 2 {
		return nil, fmt.Errorf("--scheme %d: want 0 (Source Copy), 1 (Cauchy Reed-Solomon) or 2 (XOR)", a.scheme)
	}
	if a.set["m"] && a.set["repair"] {
		return nil, errors.New("--m and --repair both given: use one")
	}
	payloads, err := readPayloads(in, a.k, a.set["k"])
	if err != nil {
		return nil, err
	}
	k := len(payloads)
	var present psn.Bitmap
	longest := 0
	for j, p := range payloads {
		if p != nil {
			present.Set(j)
			longest = max(longest, len(p))
		}
	}
	T := longest + 2
	if a.set["T"] {
		T = a.T
	}
	src := make([][]byte, k)
	for j, p := range payloads {
		if p == nil {
			continue
		}
		if src[j], err = fec.AppendSymbol(nil, p, T); err != nil {
			return nil, fmt.Errorf("position %d: %w", j, err)
		}
	}
	indices, err := repairIndices(a)
	if err != nil {
		return nil, err
	}
	over := present
	if a.set["over"] {
		if a.scheme != int(fec.SchemeCauchy) {
			return nil, fmt.Errorf("--over is for scheme 1 only (scheme %d has no coded retransmission)", a.scheme)
		}
		if over, err = parseSet(a.over, k, present); err != nil {
			return nil, err
		}
	}
	switch fec.Scheme(a.scheme) {
	case fec.SchemeSourceCopy:
		return sourceCopies(indices, k, src)
	case fec.SchemeXOR:
		if len(indices) != 1 || indices[0] != 0 {
			return nil, fmt.Errorf("scheme 2 has one repair symbol, Repair Index 0 (asked for %v)", indices)
		}
		out := make([]byte, T)
		enc, err := fec.NewEncoder()
		if err != nil {
			return nil, err
		}
		if err := enc.XOR(out, present, src); err != nil {
			return nil, err
		}
		return []string{hex.EncodeToString(out)}, nil
	}
	for _, i := range indices {
		if err := fec.CheckIndex(i, k); err != nil {
			return nil, fmt.Errorf("Repair Index %d with k = %d: i + k must not exceed 255", i, k)
		}
	}
	dst := make([][]byte, len(indices))
	for r := range dst {
		dst[r] = make([]byte, T)
	}
	enc, err := fec.NewEncoder()
	if err != nil {
		return nil, err
	}
	if err := enc.Encode(dst, indices, over, src); err != nil {
		return nil, err
	}
	lines := make([]string, len(dst))
	for r := range dst {
		lines[r] = hex.EncodeToString(dst[r])
	}
	return lines, nil
}

// sourceCopies returns the Source Copy symbols (scheme 0) of the given positions.
func sourceCopies(indices []int, k int, src [][]byte) ([]string, error) {
	var lines []string
	for _, i := range indices {
		if i >= k {
			return nil, fmt.Errorf("Source Copy of position %d: the block has k = %d positions", i, k)
		}
		if src[i] == nil {
			return nil, fmt.Errorf("Source Copy of position %d: the position is absent", i)
		}
		lines = append(lines, hex.EncodeToString(src[i]))
	}
	return lines, nil
}

// repairIndices returns the indices of --repair, or 0..m-1.
func repairIndices(a fecEncodeArgs) ([]int, error) {
	if a.set["repair"] {
		idx, err := parseList(a.repair, "--repair")
		if err != nil {
			return nil, err
		}
		return idx, nil
	}
	if a.m < 1 || a.m > fec.MaxK {
		return nil, fmt.Errorf("--m %d: want 1 to %d", a.m, fec.MaxK)
	}
	idx := make([]int, a.m)
	for i := range idx {
		idx[i] = i
	}
	return idx, nil
}

// parseSet parses the positions of --over and checks they are present positions of the block.
func parseSet(list string, k int, present psn.Bitmap) (psn.Bitmap, error) {
	var set psn.Bitmap
	pos, err := parseList(list, "--over")
	if err != nil {
		return set, err
	}
	for _, j := range pos {
		if j >= k {
			return set, fmt.Errorf("--over names position %d; the block has k = %d positions", j, k)
		}
		if !present.Has(j) {
			return set, fmt.Errorf("--over names position %d, which is absent (\"-\")", j)
		}
		set.Set(j)
	}
	return set, nil
}

// parseList parses "0,1,2" or "0-3,7" into numbers 0..254.
func parseList(list, flagName string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		if !isRange {
			hi = lo
		}
		a, errA := strconv.Atoi(strings.TrimSpace(lo))
		b, errB := strconv.Atoi(strings.TrimSpace(hi))
		if errA != nil || errB != nil || a < 0 || b < a || b > 254 {
			return nil, fmt.Errorf("%s %q: %q is not a number or range from 0 to 254", flagName, list, item)
		}
		for n := a; n <= b; n++ {
			out = append(out, n)
		}
	}
	return out, nil
}

// readPayloads reads one hex payload per line; nil marks an absent position ("-"). With
// wantK set, exactly k lines are expected.
func readPayloads(in io.Reader, k int, wantK bool) ([][]byte, error) {
	if wantK {
		if err := fec.CheckK(k); err != nil {
			return nil, fmt.Errorf("--k %d: want 1 to %d", k, fec.MaxK)
		}
	}
	if in == nil {
		return nil, errors.New("no standard input")
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 2*fec.MaxT+1024)
	var out [][]byte
	for sc.Scan() {
		n := len(out) + 1
		if n > fec.MaxK {
			return nil, fmt.Errorf("line %d: a block has at most %d positions", n, fec.MaxK)
		}
		if wantK && n > k {
			return nil, fmt.Errorf("line %d: more lines than --k %d", n, k)
		}
		line := strings.Map(func(r rune) rune {
			if unicode.IsSpace(r) {
				return -1
			}
			return r
		}, sc.Text())
		switch line {
		case "-":
			out = append(out, nil)
			continue
		case "":
			out = append(out, []byte{})
			continue
		}
		p, err := hex.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: bad hex: %v", n, strings.TrimPrefix(err.Error(), "encoding/hex: "))
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading standard input: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("no input lines: give one hex payload per position (\"-\" for absent)")
	}
	if wantK && len(out) < k {
		return nil, fmt.Errorf("%d lines for --k %d: give one line per position (\"-\" for absent)", len(out), k)
	}
	return out, nil
}
