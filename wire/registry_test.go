package wire

import "testing"

// RULINGS C1: scheme names, the private-use quarter, and HELLO's Supported Schemes bit order.
func TestSchemeRegistryC1(t *testing.T) {
	for s, name := range map[Scheme]string{0: "Source Copy", 1: "Cauchy Reed-Solomon", 2: "XOR parity",
		3: "unassigned (3)", 191: "unassigned (191)", 192: "private use (192)"} {
		if s.String() != name {
			t.Errorf("Scheme(%d) = %q, want %q", s, s, name)
		}
	}
	set := SchemeSet(0).With(SchemeCauchy).With(SchemeXOR).With(200)
	if set != 0x0006 || !set.Has(SchemeCauchy) || set.Has(SchemeSourceCopy) || set.Has(200) {
		t.Fatalf("SchemeSet %#04x", uint16(set))
	}
	if FlowKindRoCEv2.String() != "RoCEv2" || FlowKind(0).String() != "unassigned (0)" || !FlowKind(255).Private() {
		t.Fatal("flow kind names")
	}
	// A REPAIR of a private-use scheme parses; its Repair Index is not judged.
	m := Repair{Scheme: 230, K: 10, RepairIndex: 250, Present: bitmapOf(0), Symbol: []byte{0, 0}}
	got, err := ParseRepair(mustAppend(t, &m))
	if err != nil || got.Scheme != 230 || !got.Scheme.Private() {
		t.Fatalf("private scheme: %+v, %v", got, err)
	}
}
