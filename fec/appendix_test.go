package fec

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/crem-project/crem/psn"
)

// The example of the draft's Appendix: scheme 1, k = 4, T = 16, payloads "RDMA-PKT-0".."3".

const appendixT = 16

func appendixPayloads() [][]byte {
	return [][]byte{[]byte("RDMA-PKT-0"), []byte("RDMA-PKT-1"), []byte("RDMA-PKT-2"), []byte("RDMA-PKT-3")}
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func appendixSources(t testing.TB) [][]byte {
	t.Helper()
	var src [][]byte
	for _, p := range appendixPayloads() {
		s, err := AppendSymbol(nil, p, appendixT)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, s)
	}
	return src
}

var (
	appendixS = []string{
		"000a52444d412d504b542d3000000000",
		"000a52444d412d504b542d3100000000",
		"000a52444d412d504b542d3200000000",
		"000a52444d412d504b542d3300000000",
	}
	appendixR0  = "001ef6ccd7c377f0ddfc774c00000000"
	appendixR1  = "001ef6ccd7c377f0ddfc774f00000000"
	appendixR2L = "00354fdf6d4b40b57e5c400000000000"
)

// TestAppendixSourceSymbols: Section 4.1 and the Appendix, S0..S3 = len || P || padding.
func TestAppendixSourceSymbols(t *testing.T) {
	for j, s := range appendixSources(t) {
		if got := hex.EncodeToString(s); got != appendixS[j] {
			t.Errorf("S%d = %s, Appendix %s", j, got, appendixS[j])
		}
	}
}

// TestAppendixCoefficients: Section 4.3.1, C(i, j) = 1/(x_i + y_j), the Appendix table.
func TestAppendixCoefficients(t *testing.T) {
	want := [3][4]byte{
		{0xfd, 0x7e, 0xff, 0x7f},
		{0x7e, 0xfd, 0x7f, 0xff},
		{0xff, 0x7f, 0xfd, 0x7e},
	}
	for i := range 3 {
		for j := range 4 {
			c, err := Coefficient(i, j)
			if err != nil || c != want[i][j] || coefRef(i, j) != want[i][j] {
				t.Errorf("C(%d, %d) = %#x (%v), reference %#x, Appendix %#x", i, j, c, err, coefRef(i, j), want[i][j])
			}
		}
	}
}

// TestAppendixOrdinaryRepair: Section 4.3.1 and the Appendix, R0 and R1 over the whole block.
func TestAppendixOrdinaryRepair(t *testing.T) {
	enc, err := NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	src := appendixSources(t)
	dst := [][]byte{make([]byte, appendixT), make([]byte, appendixT)}
	if err := enc.Encode(dst, []int{0, 1}, psn.FirstK(4), src); err != nil {
		t.Fatal(err)
	}
	for r, want := range []string{appendixR0, appendixR1} {
		if got := hex.EncodeToString(dst[r]); got != want {
			t.Errorf("R%d = %s, Appendix %s", r, got, want)
		}
	}
}

// TestAppendixCodedRetransmission: Section 7.2 and the Appendix, R2[L] for L = {0, 1, 2}.
func TestAppendixCodedRetransmission(t *testing.T) {
	enc, err := NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	src := appendixSources(t)
	dst := [][]byte{make([]byte, appendixT)}
	if err := enc.Encode(dst, []int{2}, psn.FirstK(3), src); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(dst[0]); got != appendixR2L {
		t.Errorf("R2[L] = %s, Appendix %s", got, appendixR2L)
	}
}

// TestAppendixRecovery: Sections 7.2 and 7.4 and the Appendix: S0, S1, S2 from S3, R0, R1
// and R2[L], byte-exact, with the payloads back.
func TestAppendixRecovery(t *testing.T) {
	d := newDecoder(t)
	all := psn.FirstK(4)
	if err := d.Reset(SchemeCauchy, 4, appendixT, all); err != nil {
		t.Fatal(err)
	}
	if err := d.AddSource(3, []byte("RDMA-PKT-3")); err != nil {
		t.Fatal(err)
	}
	for i, r := range []string{appendixR0, appendixR1} {
		if err := d.AddRepair(i, all, unhex(t, r)); err != nil {
			t.Fatal(err)
		}
	}
	st := d.Status()
	if st.U != 3 || st.Missing != 1 || st.Unknown != psn.FirstK(3) || st.Held != 2 {
		t.Fatalf("before R2[L]: status %+v, want 3 unknown {0,1,2}, 2 held, 1 missing", st)
	}
	if err := d.AddRepair(2, psn.FirstK(3), unhex(t, appendixR2L)); err != nil {
		t.Fatal(err)
	}
	restored, err := d.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if restored != psn.FirstK(3) {
		t.Fatalf("restored %v, want [0 1 2]", restored.Positions(nil))
	}
	for j := range 3 {
		s, _ := d.Symbol(j)
		if got := hex.EncodeToString(s); got != appendixS[j] {
			t.Errorf("restored S%d = %s, Appendix %s", j, got, appendixS[j])
		}
		p, err := d.Payload(j)
		if err != nil || !bytes.Equal(p, appendixPayloads()[j]) {
			t.Errorf("payload %d = %q (%v)", j, p, err)
		}
	}
}
