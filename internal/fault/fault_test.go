package fault

import "testing"

func TestNamesRoundTrip(t *testing.T) {
	all := All()
	if len(all) != len(names) {
		t.Fatalf("All has %d faults, names %d", len(all), len(names))
	}
	var every Set
	for _, f := range all {
		name := f.String()
		got, err := Parse(name)
		if err != nil || got != f {
			t.Fatalf("Parse(%q) = %v, %v; want %v", name, got, err, f)
		}
		every |= f
	}
	got, err := Parse(every.String())
	if err != nil || got != every || got.Count() != len(all) {
		t.Fatalf("Parse(all) = %v, %v", got, err)
	}
	if Set(0).String() != "none" {
		t.Fatalf("zero Set is %q", Set(0).String())
	}
	if _, err := Parse("no-such-fault"); err == nil {
		t.Fatal("Parse accepted an unknown name")
	}
}
