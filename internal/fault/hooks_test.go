package fault

import (
	"reflect"
	"testing"
)

// hookMethods are Set's hook methods: those of the engines' Hooks, func() bool.
func hookMethods() []reflect.Method {
	var out []reflect.Method
	t := reflect.TypeFor[Set]()
	for i := range t.NumMethod() {
		m := t.Method(i)
		if m.Type.NumIn() == 1 && m.Type.NumOut() == 1 && m.Type.Out(0).Kind() == reflect.Bool {
			out = append(out, m)
		}
	}
	return out
}

// TestEachFaultBendsOneDecision: each fault sets exactly one hook and each hook is set by
// exactly one fault; the zero Set sets none.
func TestEachFaultBendsOneDecision(t *testing.T) {
	methods := hookMethods()
	if len(methods) != len(All()) {
		t.Errorf("%d hook methods for %d faults", len(methods), len(All()))
	}
	by := map[string]int{}
	for _, f := range append(All(), 0) {
		var set []string
		for _, m := range methods {
			if m.Func.Call([]reflect.Value{reflect.ValueOf(f)})[0].Bool() {
				set = append(set, m.Name)
				by[m.Name]++
			}
		}
		switch {
		case f == 0 && len(set) != 0:
			t.Errorf("the zero Set sets %v", set)
		case f != 0 && len(set) != 1:
			t.Errorf("%v sets %v, want one hook", f, set)
		}
	}
	for _, m := range methods {
		if by[m.Name] != 1 {
			t.Errorf("hook %s is set by %d faults, want 1", m.Name, by[m.Name])
		}
	}
}
