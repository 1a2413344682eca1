package conform

import (
	"bytes"
	"fmt"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// sourceSymbols returns the source symbols of a block of k positions from start for symbol
// length T: S_j for each PSN the runner sent (present), nil elsewhere; and the Present Bitmap
// they make.
func sourceSymbols(sent map[psn.PSN][]byte, start psn.PSN, k, T int) ([][]byte, psn.Bitmap, error) {
	src := make([][]byte, k)
	var present psn.Bitmap
	for j := range k {
		p, ok := sent[start.Add(j)]
		if !ok {
			continue
		}
		s, err := fec.AppendSymbol(nil, p, T)
		if err != nil {
			return nil, present, fmt.Errorf("source %d of the block at PSN %d: %w", j, uint32(start), err)
		}
		src[j] = s
		present.Set(j)
	}
	return src, present, nil
}

// repairSymbol computes, independently of any target, the symbol of Repair Index i over the
// positions in over, for the scheme: Cauchy R_i[over] (Scheme 1), the XOR of the sources, or
// Source Copy (the source symbol i itself).
func repairSymbol(scheme wire.Scheme, i int, over psn.Bitmap, src [][]byte, T int) ([]byte, error) {
	out := make([]byte, T)
	switch scheme {
	case wire.SchemeCauchy:
		enc, err := fec.NewEncoder()
		if err != nil {
			return nil, err
		}
		if err := enc.Encode([][]byte{out}, []int{i}, over, src); err != nil {
			return nil, err
		}
	case wire.SchemeXOR:
		over.Each(func(j int) {
			for n := range out {
				out[n] ^= src[j][n]
			}
		})
	case wire.SchemeSourceCopy:
		if i >= len(src) || src[i] == nil {
			return nil, fmt.Errorf("Source Copy of position %d, which carries no source", i)
		}
		copy(out, src[i])
	default:
		return nil, fmt.Errorf("scheme %v: not one the runner can compute", scheme)
	}
	return out, nil
}

// firstDiff describes where two symbols first differ.
func firstDiff(want, got []byte) string {
	if len(want) != len(got) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	for i := range want {
		if want[i] != got[i] {
			return fmt.Sprintf("octet %d is %#02x, want %#02x", i, got[i], want[i])
		}
	}
	return "equal"
}

// roceOf parses the BTH of a RoCEv2 datagram: its opcode, destination QP and PSN.
func roceOf(b []byte) (op roce.Opcode, qp uint32, p psn.PSN, ok bool) {
	bth, _, err := roce.ParseBTH(b)
	if err != nil {
		return 0, 0, 0, false
	}
	return bth.OpCode, bth.DestQP, bth.PSN, true
}

// bitsOf lists the positions of a bitmap.
func bitsOf(b psn.Bitmap) []int { return b.Positions(nil) }

// bitmapOf sets the positions.
func bitmapOf(js ...int) psn.Bitmap {
	var b psn.Bitmap
	for _, j := range js {
		b.Set(j)
	}
	return b
}

func equalBytes(a, b []byte) bool { return bytes.Equal(a, b) }
