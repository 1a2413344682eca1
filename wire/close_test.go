package wire

import "testing"

// RULINGS C2: CLOSE is Reason (8) + Reserved (24); reasons 0..5; any other value still parses.
func TestCloseReasonsC2(t *testing.T) {
	for _, tc := range []struct {
		r    Reason
		name string
	}{
		{0, "normal end"}, {1, "idle timeout"}, {2, "PARAM_UPDATE unanswered"}, {3, "resources exhausted"},
		{4, "circuit breaker"}, {5, "protocol error"}, {6, "unassigned (6)"}, {250, "private use (250)"},
	} {
		m := Close{FlowID: 0x01020304, Reason: tc.r}
		b := mustAppend(t, &m)
		want := []byte{0x19, 0, 0, 12, 1, 2, 3, 4, byte(tc.r), 0, 0, 0}
		if string(b) != string(want) {
			t.Fatalf("reason %d: % x, want % x", tc.r, b, want)
		}
		got, err := ParseClose(b)
		if err != nil || got != m {
			t.Fatalf("reason %d: %+v, %v", tc.r, got, err)
		}
		if got.Reason.String() != tc.name {
			t.Errorf("Reason(%d) = %q, want %q", tc.r, got.Reason, tc.name)
		}
	}
	if ReasonCircuitBreaker != 4 || ReasonParamUnanswered != 2 || !Reason(192).Private() || Reason(191).Private() {
		t.Fatal("reason constants")
	}
	_, err := ParseClose(edit(mustAppend(t, &Close{}), grow(0, 0, 0, 0)))
	wantFieldError(t, err, TypeClose, "Length")
	_, err = ParseClose(edit(mustAppend(t, &Close{}), cut(4)))
	wantFieldError(t, err, TypeClose, "Reason")
}
