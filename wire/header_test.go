package wire

import (
	"errors"
	"testing"
)

// Common header: Version 1, Type, Flags, Length, Flow ID in network byte order.
func TestHeaderFieldsCommonHeader(t *testing.T) {
	h, err := ParseHeader(unhex(t, appendixRepair))
	if err != nil {
		t.Fatal(err)
	}
	want := Header{Version: 1, Type: TypeRepair, Flags: 0x80, Length: 44, FlowID: 0xbeef}
	if h != want {
		t.Fatalf("ParseHeader = %+v, want %+v", h, want)
	}
}

// Draft, common header: messages with an unknown Version or Type MUST be discarded. The error
// says so (ErrDiscard) and tells the two cases apart; a known type never yields it.
func TestUnknownVersionOrTypeDiscard(t *testing.T) {
	good := unhex(t, appendixRepair)
	for _, tc := range []struct {
		name    string
		first   byte
		target  error
		message string
	}{
		{"version 0", 0x01, ErrUnknownVersion, "wire: unknown Version 0: discard silently"},
		{"version 2", 0x21, ErrUnknownVersion, "wire: unknown Version 2: discard silently"},
		{"version 15", 0xf9, ErrUnknownVersion, "wire: unknown Version 15: discard silently"},
		{"type 0", 0x10, ErrUnknownType, "wire: unknown Type 0: discard silently"},
		{"type 10", 0x1a, ErrUnknownType, "wire: unknown Type 10: discard silently"},
		{"type 12 (private use quarter)", 0x1c, ErrUnknownType, "wire: unknown Type 12: discard silently"},
		{"type 15", 0x1f, ErrUnknownType, "wire: unknown Type 15: discard silently"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, b := range [][]byte{
				append([]byte{tc.first}, good[1:]...),
				{tc.first}, // the first octet alone decides
			} {
				for _, parse := range []func([]byte) error{
					func(b []byte) error { _, err := ParseHeader(b); return err },
					func(b []byte) error { _, err := Parse(b); return err },
					func(b []byte) error { _, err := ParseRepair(b); return err },
					func(b []byte) error { _, err := ParseClose(b); return err },
				} {
					err := parse(b)
					if !errors.Is(err, ErrDiscard) || !errors.Is(err, tc.target) {
						t.Fatalf("% x: error %v, want %v and ErrDiscard", b, err, tc.target)
					}
					var fe *FieldError
					if errors.As(err, &fe) {
						t.Fatalf("discard error is also a FieldError: %v", err)
					}
					if err.Error() != tc.message {
						t.Fatalf("message %q, want %q", err, tc.message)
					}
				}
			}
		})
	}
	for typ := TypeRepair; typ <= TypeClose; typ++ {
		_, err := ParseHeader([]byte{0x10 | byte(typ), 0, 0, 8, 0, 0, 0, 0})
		if errors.Is(err, ErrDiscard) {
			t.Errorf("known type %v yields a discard error", typ)
		}
	}
}

// The Length field is checked against the datagram, both ways.
func TestLengthMustMatchDatagram(t *testing.T) {
	for _, b := range seedBytes(t, 0) {
		typ := Type(b[0] & 0x0f)
		// Datagram shorter than Length.
		_, err := Parse(b[:len(b)-1])
		wantFieldError(t, err, typ, "Length")
		// Datagram longer than Length.
		_, err = Parse(append(append([]byte(nil), b...), 0))
		wantFieldError(t, err, typ, "Length")
	}
	// Length below the header size.
	_, err := ParseHeader([]byte{0x19, 0, 0, 4, 0, 0, 0, 0})
	wantFieldError(t, err, TypeClose, "Length")
}

// Every prefix of every message is an error, never a panic or a success; the header's own
// fields are named when the datagram ends inside them.
func TestTruncationAtEveryLength(t *testing.T) {
	for _, full := range seedBytes(t, 0) {
		typ := Type(full[0] & 0x0f)
		for n := 0; n < len(full); n++ {
			b := full[:n]
			if _, err := Parse(b); err == nil {
				t.Fatalf("%v cut to %d of %d octets parsed without error", typ, n, len(full))
			}
			// The same prefix with its Length field saying so: the body field that does not fit
			// (or the header) is named.
			c := edit(b, func(b []byte) []byte { return b })
			_, err := Parse(c)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("%v cut to %d octets with Length fixed: %v, want a FieldError", typ, n, err)
			}
		}
	}
	for n, field := range map[int]string{0: "Version", 1: "Flags", 2: "Length", 3: "Length", 4: "Flow ID", 7: "Flow ID"} {
		b := []byte{0x19, 0, 0, 12, 0, 0, 0, 0}[:n]
		_, err := ParseHeader(b)
		typ := TypeClose
		if n == 0 {
			typ = 0
		}
		wantFieldError(t, err, typ, field)
	}
}

// A message handed to the parser of another type names the Type field.
func TestParserRefusesOtherType(t *testing.T) {
	_, err := ParseHello(unhex(t, appendixRepair))
	wantFieldError(t, err, TypeRepair, "Type")
	if want := "wire: REPAIR: Type: is REPAIR, not HELLO"; err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
}

// Parse dispatches on the header to the parser of each of the nine types.
func TestParseDispatchesAllNineTypes(t *testing.T) {
	seen := map[Type]bool{}
	for _, m := range seedMessages() {
		b := mustAppend(t, m)
		got, err := Parse(b)
		if err != nil {
			t.Fatalf("Parse(%v): %v", m.Type(), err)
		}
		if got.Type() != m.Type() || got.Length() != len(b) {
			t.Fatalf("Parse(%v) gave %v of length %d", m.Type(), got.Type(), got.Length())
		}
		again := mustAppend(t, got)
		if string(again) != string(b) {
			t.Fatalf("%v: re-encoded\n %x\nwant\n %x", m.Type(), again, b)
		}
		seen[m.Type()] = true
	}
	if len(seen) != 9 {
		t.Fatalf("seed messages cover %d types, want 9", len(seen))
	}
}

// Reserved fields and undefined flag bits are written as zero and ignored on parse.
func TestReservedIgnoredOnParse(t *testing.T) {
	for _, b := range seedBytes(t, 0) {
		mask := reservedMask(b)
		dirty := append([]byte(nil), b...)
		for i := range dirty {
			dirty[i] |= mask[i]
		}
		m, err := Parse(dirty)
		if err != nil {
			t.Fatalf("%v with reserved bits set: %v", Type(b[0]&0x0f), err)
		}
		if clean := mustAppend(t, m); string(clean) != string(b) {
			t.Fatalf("%v: reserved bits leaked into\n %x\nwant\n %x", m.Type(), clean, b)
		}
	}
}

func TestTypeNames(t *testing.T) {
	want := []string{"", "REPAIR", "HELLO", "HELLO_ACK", "PARAM_UPDATE", "PARAM_ACK", "REPAIR_REQUEST",
		"LOSS_REPORT", "PATH_REPORT", "CLOSE"}
	for i := 1; i < len(want); i++ {
		if got := Type(i).String(); got != want[i] {
			t.Errorf("Type(%d) = %q, want %q", i, got, want[i])
		}
	}
	if got := Type(12).String(); got != "Type(12)" {
		t.Errorf("Type(12) = %q", got)
	}
}
