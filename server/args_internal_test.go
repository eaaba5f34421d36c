package server

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeArgs: decodeArgs takes what a json.Decoder with
// DisallowUnknownFields takes, into the same value, and refuses what it
// refuses; it also refuses what follows the arguments' object, which the
// Decoder leaves unread.
func FuzzDecodeArgs(f *testing.F) {
	for _, seed := range []string{
		`{}`, `null`, `{"sandbox_id":"s","path":"/p","content":"c"}`, `{"SANDBOX_ID":"s"}`, `{"ſandbox_id":"s"}`,
		`{"sandbox_id":"s","typo":1}`, `{"content":{"a":1}}`, `{"content":1}`, `[]`, `"x"`, `{"path":"a"} {}`,
		`{"path":"a","path":"b"}`, `{"-B":3,"-C":1,"pattern":"x"}`, `{"-b":3}`, `{"B":3}`, `{"before":3}`, `{`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		check[WriteInput](t, data)
		check[GrepInput](t, data)
		check[ListInput](t, data)
	})
}

func check[In any](t *testing.T, data string) {
	var want In
	dec := json.NewDecoder(bytes.NewReader([]byte(data)))
	dec.DisallowUnknownFields()
	decErr := dec.Decode(&want)
	// What follows, less JSON's own white space (bytes.TrimSpace would
	// also drop \v, \f and Unicode spaces, which JSON does not allow).
	trailing := decErr == nil && len(bytes.Trim([]byte(data)[dec.InputOffset():], " \t\r\n")) > 0

	var got In
	err := decodeArgs([]byte(data), &got)
	switch {
	case decErr != nil || trailing:
		if err == nil {
			t.Fatalf("%T %q: decodeArgs took it; the Decoder: %v (trailing data: %v)", got, data, decErr, trailing)
		}
	case err != nil:
		t.Fatalf("%T %q: decodeArgs: %v; the Decoder took it", got, data, err)
	case !reflect.DeepEqual(got, want):
		t.Fatalf("%T %q: decodeArgs made %+v, the Decoder %+v", got, data, got, want)
	}
}

// TestArgFieldsFlat: every tool's arguments are flat, so decodeArgs checks
// their keys itself, and names the fields as encoding/json does.
func TestArgFieldsFlat(t *testing.T) {
	type nested struct {
		In WriteInput `json:"in"`
	}
	for _, c := range []struct {
		v     any
		names []string
		flat  bool
	}{
		{WriteInput{}, []string{"sandbox_id", "path", "content"}, true},
		{GrepInput{}, []string{"sandbox_id", "pattern", "path", "glob", "mode", "-B", "-A", "-C", "literal", "ignore_case"}, true},
		{ListInput{}, nil, true},
		{struct {
			WriteInput
			Extra string
			skip  int
			Gone  int `json:"-"`
		}{}, []string{"sandbox_id", "path", "content", "Extra"}, true},
		{nested{}, nil, false},
		{struct{ M map[string]any }{}, nil, false},
	} {
		names, flat := argFields(reflect.TypeOf(c.v))
		if flat != c.flat || !reflect.DeepEqual(names, c.names) {
			t.Errorf("%T: %q flat=%v, want %q flat=%v", c.v, names, flat, c.names, c.flat)
		}
	}
	for _, typ := range []any{CreateInput{}, SandboxInput{}, ListInput{}, LsInput{}, ReadInput{}, WriteInput{}, EditInput{},
		GlobInput{}, GrepInput{}, ExecuteInput{}, JobInput{}, JobOutputInput{}} {
		if _, flat := argFields(reflect.TypeOf(typ)); !flat {
			t.Errorf("%T is not flat: decodeArgs leaves it to a json.Decoder, which copies the body", typ)
		}
	}
}
