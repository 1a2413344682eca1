package gateway

import (
	"reflect"
	"sync"
	"unsafe"
)

// addCounters adds every counter of src into dst. The engines' counter structs are made of
// uint64 only (nested structs and arrays of them included): those are added as one run of
// words, which takes no reflection and picks up every counter an engine adds; any other struct
// is added field by field by reflection.
func addCounters[T any](dst, src *T) {
	if !onlyWords(reflect.TypeFor[T]()) {
		addInto(reflect.ValueOf(dst).Elem(), reflect.ValueOf(*src))
		return
	}
	n := unsafe.Sizeof(*dst) / 8
	d := unsafe.Slice((*uint64)(unsafe.Pointer(dst)), n)
	s := unsafe.Slice((*uint64)(unsafe.Pointer(src)), n)
	for i := range d {
		d[i] += s[i]
	}
}

var wordTypes sync.Map // reflect.Type -> bool

// onlyWords reports whether t is a struct of exported uint64 fields, nested structs and arrays
// of them, with no padding.
func onlyWords(t reflect.Type) bool {
	if v, ok := wordTypes.Load(t); ok {
		return v.(bool)
	}
	var words func(reflect.Type) bool
	words = func(t reflect.Type) bool {
		switch t.Kind() {
		case reflect.Uint64:
			return true
		case reflect.Array:
			return words(t.Elem())
		case reflect.Struct:
			for i := range t.NumField() {
				if f := t.Field(i); !f.IsExported() || !words(f.Type) {
					return false
				}
			}
			return true
		}
		return false
	}
	ok := t.Kind() == reflect.Struct && words(t) && t.Size()%8 == 0
	wordTypes.Store(t, ok)
	return ok
}

// addInto adds every unsigned counter of src into dst (same struct type), recursively.
func addInto(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Uint64:
		dst.SetUint(dst.Uint() + src.Uint())
	case reflect.Struct:
		for i := range src.NumField() {
			if dst.Field(i).CanSet() {
				addInto(dst.Field(i), src.Field(i))
			}
		}
	case reflect.Array:
		for i := range src.Len() {
			addInto(dst.Index(i), src.Index(i))
		}
	}
}
