package egressctl

import (
	"reflect"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// TestWireTypesMatchBackend: the enforcer's copies of the contract's egress
// types have the same fields, types and JSON tags, so a change to one that
// is not made to the other fails here instead of dropping a field between
// the backend and the enforcer (the agent links these copies, not backend).
func TestWireTypesMatchBackend(t *testing.T) {
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[Policy](), reflect.TypeFor[backend.Egress]()},
		{reflect.TypeFor[Denial](), reflect.TypeFor[backend.EgressDenial]()},
		{reflect.TypeFor[Status](), reflect.TypeFor[backend.EgressStatus]()},
	} {
		sameShape(t, pair[0], pair[1], pair[0].Name())
	}
}

func sameShape(t *testing.T, a, b reflect.Type, at string) {
	t.Helper()
	if a.Kind() != b.Kind() {
		t.Errorf("%s: kind %s here, %s in backend", at, a.Kind(), b.Kind())
		return
	}
	switch a.Kind() {
	case reflect.Struct:
		if a == b {
			return // the same type (time.Time)
		}
		if a.NumField() != b.NumField() {
			t.Errorf("%s: %d fields here, %d in backend", at, a.NumField(), b.NumField())
			return
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Tag.Get("json") != fb.Tag.Get("json") {
				t.Errorf("%s field %d: %s `json:%q` here, %s `json:%q` in backend", at, i, fa.Name, fa.Tag.Get("json"), fb.Name, fb.Tag.Get("json"))
				continue
			}
			sameShape(t, fa.Type, fb.Type, at+"."+fa.Name)
		}
	case reflect.Slice, reflect.Pointer:
		sameShape(t, a.Elem(), b.Elem(), at+"[]")
	default:
		if a != b {
			t.Errorf("%s: %s here, %s in backend", at, a, b)
		}
	}
}
