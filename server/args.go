package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// decodeArgs decodes a tool's JSON arguments into v (a pointer to a
// struct), refusing keys it has no field for, as a json.Decoder with
// DisallowUnknownFields does. Unlike a Decoder, it reads data where it is:
// a Decoder copies its input into a buffer that grows by doubling, which
// made a 60 MiB write_file body cost two to three times that again.
func decodeArgs(data []byte, v any) error {
	fields, flat := argFields(reflect.TypeOf(v).Elem())
	if !flat {
		// Nested structs: unknown keys inside them are the Decoder's to
		// find.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return err
	}
	var keys map[string]skipJSON
	if json.Unmarshal(data, &keys) != nil {
		return nil // null
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		// encoding/json matches a key to a field case-insensitively.
		if !slices.ContainsFunc(fields, func(f string) bool { return strings.EqualFold(f, k) }) {
			return fmt.Errorf("json: unknown field %q", k)
		}
	}
	return nil
}

// skipJSON takes any JSON value and keeps nothing of it.
type skipJSON struct{}

func (*skipJSON) UnmarshalJSON([]byte) error { return nil }

var argFieldsCache sync.Map // reflect.Type -> argFieldsOf

type argFieldsOf struct {
	names []string
	flat  bool
}

// argFields returns the JSON names of struct type t's fields, and whether
// t is flat: its fields (those of embedded structs included) hold no
// structs, so every key an object may carry for it is one of names.
func argFields(t reflect.Type) (names []string, flat bool) {
	if c, ok := argFieldsCache.Load(t); ok {
		f := c.(argFieldsOf)
		return f.names, f.flat
	}
	names, flat = collectFields(t, nil)
	argFieldsCache.Store(t, argFieldsOf{names, flat})
	return names, flat
}

func collectFields(t reflect.Type, names []string) ([]string, bool) {
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" && f.Anonymous {
			var ok bool
			if names, ok = collectFields(f.Type, names); !ok {
				return nil, false
			}
			continue
		}
		if !plainJSON(f.Type) {
			return nil, false
		}
		names = append(names, cmp.Or(name, f.Name))
	}
	return names, true
}

// plainJSON reports whether values of t hold no struct (whose unknown keys
// a Decoder would refuse).
func plainJSON(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return plainJSON(t.Elem())
	case reflect.Map:
		return plainJSON(t.Elem())
	case reflect.Struct, reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return false
	}
	return true
}
