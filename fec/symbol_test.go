package fec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// TestSourceSymbolLayout: Section 4.1, S = uint16(len(P)) || P || zero padding to T, and P back
// exactly; the edge lengths 0 and T - 2.
func TestSourceSymbolLayout(t *testing.T) {
	for _, c := range []struct {
		p    string
		T    int
		want string
	}{
		{"", 2, "\x00\x00"},
		{"", 5, "\x00\x00\x00\x00\x00"},
		{"ab", 4, "\x00\x02ab"},
		{"ab", 7, "\x00\x02ab\x00\x00\x00"},
	} {
		s, err := AppendSymbol(nil, []byte(c.p), c.T)
		if err != nil || string(s) != c.want {
			t.Errorf("symbol of %q, T = %d: %x (%v), want %x", c.p, c.T, s, err, c.want)
			continue
		}
		p, err := Payload(s)
		if err != nil || string(p) != c.p {
			t.Errorf("Payload(%x) = %q (%v), want %q", s, p, err, c.p)
		}
	}
	big := bytes.Repeat([]byte{0xa5}, MaxT-2)
	s, err := AppendSymbol(nil, big, MaxT)
	if err != nil || binary.BigEndian.Uint16(s) != MaxT-2 || len(s) != MaxT {
		t.Fatalf("payload of T-2 = %d octets: %v", MaxT-2, err)
	}
}

// TestSourceSymbolErrors: Section 4.1, "T ... is at least the largest UDP payload of the flow
// plus 2": a longer payload is an error, as is a T the 16-bit Symbol Length cannot carry.
func TestSourceSymbolErrors(t *testing.T) {
	if _, err := AppendSymbol(nil, make([]byte, 15), 16); !errors.Is(err, ErrPayloadLong) {
		t.Errorf("15 octets in T = 16: %v, want ErrPayloadLong", err)
	}
	for _, T := range []int{-1, 0, 1, MaxT + 1} {
		if _, err := AppendSymbol(nil, nil, T); !errors.Is(err, ErrSymbolLength) {
			t.Errorf("T = %d: %v, want ErrSymbolLength", T, err)
		}
	}
	for _, c := range []struct {
		sym  string
		want error
	}{
		{"", ErrSymbolLength},
		{"\x00", ErrSymbolLength},
		{"\x00\x01", ErrLengthPrefix},
		{"\x00\x03ab", ErrLengthPrefix},
		{"\xff\xffab", ErrLengthPrefix},
		{"\x00\x01ab", ErrPadding},
		{"\x00\x00\x00\x01", ErrPadding},
	} {
		if _, err := Payload([]byte(c.sym)); !errors.Is(err, c.want) {
			t.Errorf("Payload(%x) = %v, want %v", c.sym, err, c.want)
		}
	}
}

// TestSourceSymbolIntoCallerBuffer: building a symbol into a buffer with room allocates
// nothing, keeps what the buffer held before, and clears stale padding.
func TestSourceSymbolIntoCallerBuffer(t *testing.T) {
	buf := bytes.Repeat([]byte{0xee}, 64)
	p := []byte("RDMA-PKT-0")
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if _, err = AppendSymbol(buf[:0], p, 16); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("AppendSymbol into a buffer with room: %v allocations", allocs)
	}
	s, _ := AppendSymbol(buf[:0], p, 16)
	if got := string(s); got != "\x00\x0aRDMA-PKT-0\x00\x00\x00\x00" {
		t.Errorf("symbol over stale buffer %x", s)
	}
	s, _ = AppendSymbol([]byte("hdr"), p, 16)
	if string(s[:3]) != "hdr" || len(s) != 19 {
		t.Errorf("append after existing octets: %x", s)
	}
}

// FuzzPayload: Section 4.1, the symbol parser never panics, and whatever it accepts is exactly
// the symbol of the payload it returns.
func FuzzPayload(f *testing.F) {
	f.Add(unhex(f, appendixS[0]))
	f.Add([]byte{0, 0})
	f.Add([]byte{0xff, 0xff, 1})
	f.Add([]byte{0, 1, 7, 0, 1})
	f.Fuzz(func(t *testing.T, sym []byte) {
		p, err := Payload(sym)
		if err != nil {
			return
		}
		again, err := AppendSymbol(nil, p, len(sym))
		if err != nil || !bytes.Equal(again, sym) {
			t.Fatalf("Payload(%x) = %x, symbol again %x (%v)", sym, p, again, err)
		}
	})
}
