package wire

import (
	"bytes"
	"errors"
	"testing"
)

// checkRoundTrip is the property every fuzz target checks: parsing never panics; an error is
// either a discard error or a *FieldError; a parsed message re-encodes to the same octets
// except for reserved bits and undefined flags, which come out zero; and re-encoding is stable.
func checkRoundTrip(t *testing.T, b []byte, parse func([]byte) (Message, error)) {
	m, err := parse(b)
	if err != nil {
		var fe *FieldError
		if !errors.Is(err, ErrDiscard) && !errors.As(err, &fe) {
			t.Fatalf("error %v is of type %T, neither discard nor field error", err, err)
		}
		if m != nil {
			t.Fatalf("error %v came with a message", err)
		}
		return
	}
	if m.Length() != len(b) {
		t.Fatalf("%v: Length() %d, datagram %d", m.Type(), m.Length(), len(b))
	}
	b2, err := m.Append(nil)
	if err != nil {
		t.Fatalf("%v parsed from %x does not re-encode: %v", m.Type(), b, err)
	}
	if len(b2) != len(b) {
		t.Fatalf("%v: re-encoded to %d octets from %d", m.Type(), len(b2), len(b))
	}
	mask := reservedMask(b)
	for i := range b {
		if b2[i] != b[i]&^mask[i] {
			t.Fatalf("%v: octet %d re-encoded as %#02x from %#02x (reserved mask %#02x)\n in  %x\n out %x",
				m.Type(), i, b2[i], b[i], mask[i], b, b2)
		}
	}
	m2, err := parse(b2)
	if err != nil {
		t.Fatalf("%v: re-encoding does not parse: %v", m.Type(), err)
	}
	if b3, _ := m2.Append(nil); !bytes.Equal(b3, b2) {
		t.Fatalf("%v: encoding not stable\n %x\n %x", m.Type(), b2, b3)
	}
}

func fuzzType(f *testing.F, typ Type, parse func([]byte) (Message, error)) {
	for _, b := range seedBytes(f, typ) {
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, parse) })
}

func FuzzRepair(f *testing.F) {
	f.Add(unhex(f, appendixRepair))
	fuzzType(f, TypeRepair, func(b []byte) (Message, error) { return wrap(ParseRepair(b)) })
}

func FuzzHello(f *testing.F) {
	fuzzType(f, TypeHello, func(b []byte) (Message, error) { return wrap(ParseHello(b)) })
}

func FuzzHelloAck(f *testing.F) {
	fuzzType(f, TypeHelloAck, func(b []byte) (Message, error) { return wrap(ParseHelloAck(b)) })
}

func FuzzParamUpdate(f *testing.F) {
	fuzzType(f, TypeParamUpdate, func(b []byte) (Message, error) { return wrap(ParseParamUpdate(b)) })
}

func FuzzParamAck(f *testing.F) {
	fuzzType(f, TypeParamAck, func(b []byte) (Message, error) { return wrap(ParseParamAck(b)) })
}

func FuzzRepairRequest(f *testing.F) {
	fuzzType(f, TypeRepairRequest, func(b []byte) (Message, error) { return wrap(ParseRepairRequest(b)) })
}

func FuzzLossReport(f *testing.F) {
	fuzzType(f, TypeLossReport, func(b []byte) (Message, error) { return wrap(ParseLossReport(b)) })
}

func FuzzPathReport(f *testing.F) {
	fuzzType(f, TypePathReport, func(b []byte) (Message, error) { return wrap(ParsePathReport(b)) })
}

func FuzzClose(f *testing.F) {
	fuzzType(f, TypeClose, func(b []byte) (Message, error) { return wrap(ParseClose(b)) })
}

// FuzzParse feeds any datagram to the generic parser, seeded with every type and the discard cases.
func FuzzParse(f *testing.F) {
	for _, b := range seedBytes(f, 0) {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x2a, 0, 0, 8, 0, 0, 0, 0})
	f.Add([]byte{0x1c, 0, 0, 8, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) { checkRoundTrip(t, b, Parse) })
}
