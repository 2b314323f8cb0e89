package trace

import (
	"fmt"
	"reflect"
	"time"
)

// Own returns a copy of kv whose values are deep copies: strings, numbers and
// bools re-boxed, slices, arrays, structs and pointers copied element by
// element (a nil slice or pointer stays nil), each keeping its dynamic type so
// matchers compare them with reflect.DeepEqual as before. It panics on a
// value it cannot copy: maps, channels, functions, unsafe pointers,
// interfaces nested in a composite, and unexported struct fields.
//
// Copying is what makes a disabled trace point free. Only the contents of
// kv's values flow into the copy, never kv's backing array or the values'
// boxes themselves, so escape analysis lets a caller build both on its stack.
// Reading through reflect.Value accessors (rather than storing the interface
// values) is what keeps that flow visible to the compiler; go build
// -gcflags=-m reports kv as leaking only with derefs=2.
func Own(kv []any) []any {
	out := make([]any, len(kv))
	for i, v := range kv {
		out[i] = own(v)
	}
	return out
}

func own(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		return x
	case int:
		return x
	case int64:
		return x
	case uint64:
		return x
	case bool:
		return x
	case time.Duration:
		return x
	case float64:
		return x
	case []string:
		if x == nil {
			return x
		}
		return append([]string(nil), x...)
	}
	src := reflect.ValueOf(v)
	dst := reflect.New(src.Type()).Elem()
	copyValue(dst, src)
	return dst.Interface()
}

// copyValue sets dst, a settable zero value of src's type, to a deep copy of
// src.
func copyValue(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Bool:
		dst.SetBool(src.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		dst.SetInt(src.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		dst.SetUint(src.Uint())
	case reflect.Float32, reflect.Float64:
		dst.SetFloat(src.Float())
	case reflect.Complex64, reflect.Complex128:
		dst.SetComplex(src.Complex())
	case reflect.String:
		dst.SetString(src.String())
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		n := src.Len()
		dst.Set(reflect.MakeSlice(src.Type(), n, n))
		for i := range n {
			copyValue(dst.Index(i), src.Index(i))
		}
	case reflect.Array:
		for i := range src.Len() {
			copyValue(dst.Index(i), src.Index(i))
		}
	case reflect.Struct:
		for i := range src.NumField() {
			if !dst.Field(i).CanSet() {
				panic(fmt.Sprintf("trace: cannot record %s: unexported field %s", src.Type(), src.Type().Field(i).Name))
			}
			copyValue(dst.Field(i), src.Field(i))
		}
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		copyValue(p.Elem(), src.Elem())
		dst.Set(p)
	default:
		panic(fmt.Sprintf("trace: cannot record a value of type %s (kind %s)", src.Type(), src.Kind()))
	}
}

// Pending collects trace points to emit later, for code that must not emit
// while it holds a lock (a parked Emit would hold it too). The zero value is
// ready to use. Like Emit, Add with a nil Tracer allocates nothing.
type Pending struct{ events []pendingEvent }

type pendingEvent struct {
	kind   string
	fields []any
}

// Add records a trace point for Emit; with a nil t it does nothing. The
// values are copied now (see Own), so later changes to them do not show.
func (p *Pending) Add(t *Tracer, kind string, kv ...any) {
	if t == nil {
		return
	}
	p.add(kind, kv)
}

//go:noinline
func (p *Pending) add(kind string, kv []any) {
	p.events = append(p.events, pendingEvent{kind, Own(kv)})
}

// Emit emits the collected trace points on t, in the order they were added,
// and forgets them.
func (p *Pending) Emit(t *Tracer) {
	if t == nil {
		return
	}
	for _, e := range p.events {
		t.record(e.kind, e.fields)
	}
	p.events = nil
}
