package config

import (
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
)

// OpenSage templating: top-level UPPERCASE keys with scalar values are
// template variables, and ${VAR} in any string inside [sandbox] is replaced
// by the environment variable VAR, else the top-level key VAR. An undefined
// variable is an error. There is no escape for a literal "${".
var templateRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\$\{([A-Z0-9_]+)\}`) })

// templateVars collects the file's template variables.
func templateVars(doc map[string]any) map[string]string {
	vars := map[string]string{}
	for k, v := range doc {
		if !isUpper(k) {
			continue
		}
		switch v := v.(type) {
		case string, int64, float64, bool:
			vars[k] = scalarString(v)
		}
	}
	return vars
}

// isUpper is Python's str.isupper, which OpenSage uses: at least one cased
// letter and no lower-case ones ("GDB_PORT", "A1"; not "_1" or "Port").
func isUpper(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsLower(r) {
			return false
		}
		cased = cased || unicode.IsUpper(r)
	}
	return cased
}

// scalarString formats a TOML scalar as template text and as the value of a
// string-typed key written as a number or boolean.
func scalarString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	return fmt.Sprint(v)
}

// expander expands templates in a decoded TOML tree and coerces scalars to
// the type of the Go field that will receive them, so that "${GDB_PORT}"
// becomes a number where a number is wanted and stays text where text is.
// It reports structural mismatches itself, naming the key.
type expander struct {
	vars map[string]string
	errs []string
}

func (x *expander) errorf(key toml.Key, format string, args ...any) {
	x.errs = append(x.errs, key.String()+": "+fmt.Sprintf(format, args...))
}

// expand returns v with templates expanded, coerced towards Go type t (nil:
// no target, expand only).
func (x *expander) expand(v any, t reflect.Type, key toml.Key) any {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && isRaw(t) {
		t = nil // kept as written, or decoded by its own UnmarshalTOML
	}
	switch v := v.(type) {
	case map[string]any:
		var child func(string) reflect.Type
		switch {
		case t == nil:
			child = func(string) reflect.Type { return nil }
		case t.Kind() == reflect.Struct:
			child = func(k string) reflect.Type { ft, _ := fieldFor(t, k); return ft }
		case t.Kind() == reflect.Map:
			child = func(string) reflect.Type { return t.Elem() }
		default:
			x.errorf(key, "want %s, got a table", describeType(t))
			return v
		}
		out := make(map[string]any, len(v))
		for _, k := range sortedKeys(v) {
			out[k] = x.expand(v[k], child(k), slices.Concat(key, toml.Key{k}))
		}
		return out
	case []map[string]any:
		elem, ok := x.listElem(t, key, "a list of tables")
		if !ok {
			return v
		}
		out := make([]map[string]any, len(v))
		for i, m := range v {
			out[i], _ = x.expand(m, elem, key).(map[string]any)
		}
		return out
	case []any:
		elem, ok := x.listElem(t, key, "a list")
		if !ok {
			return v
		}
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = x.expand(e, elem, key)
		}
		return out
	case string:
		return x.coerce(x.substitute(v, key), t, key)
	case int64, float64, bool:
		return x.coerce(v, t, key)
	}
	if t != nil { // a date or time: no key of ours takes one
		x.errorf(key, "want %s, got a date or time", describeType(t))
	}
	return v
}

func (x *expander) listElem(t reflect.Type, key toml.Key, got string) (reflect.Type, bool) {
	if t == nil {
		return nil, true
	}
	if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		return t.Elem(), true
	}
	x.errorf(key, "want %s, got %s", describeType(t), got)
	return nil, false
}

// substitute replaces ${VAR} in s; the environment wins over the file.
func (x *expander) substitute(s string, key toml.Key) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return templateRE().ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		if v, ok := x.vars[name]; ok {
			return v
		}
		x.errorf(key, "undefined template variable ${%s} (define %s as a top-level key of the file or in the environment; known: %s)",
			name, name, knownVars(x.vars))
		return m
	})
}

func knownVars(vars map[string]string) string {
	if len(vars) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(vars)), ", ")
}

// coerce converts scalar v to the kind of t: text to numbers and booleans
// (where the text is one), numbers and booleans to text, integers or
// duration strings to durations. Empty text is the zero value, so a
// template variable set to "" leaves a key unset.
func (x *expander) coerce(v any, t reflect.Type, key toml.Key) any {
	if t == nil {
		return v
	}
	if t == durationType {
		return x.duration(v, key)
	}
	s, isString := v.(string)
	s = strings.TrimSpace(s)
	switch k := t.Kind(); {
	case k == reflect.String:
		return scalarString(v)
	case k == reflect.Bool:
		switch {
		case !isString:
			if _, ok := v.(bool); ok {
				return v
			}
		case s == "":
			return false
		default:
			if b, err := strconv.ParseBool(s); err == nil {
				return b
			}
		}
	case k >= reflect.Int && k <= reflect.Uint64:
		switch v := v.(type) {
		case int64:
			return v
		case float64:
			if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
				return int64(v)
			}
		case string:
			if s == "" {
				return int64(0)
			}
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return n
			}
		}
	case k == reflect.Float32 || k == reflect.Float64:
		switch v := v.(type) {
		case float64:
			return v
		case int64:
			return float64(v)
		case string:
			if s == "" {
				return 0.0
			}
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				return f
			}
		}
	default: // a list or table wanted
	}
	x.errorf(key, "want %s, got %s", describeType(t), describeValue(v))
	return v
}

// duration turns seconds (integer, float or numeric text) or a Go duration
// string into nanoseconds, which BurntSushi stores into a time.Duration.
func (x *expander) duration(v any, key toml.Key) any {
	var d time.Duration
	switch v := v.(type) {
	case int64:
		d = time.Duration(v) * time.Second
	case float64:
		d = time.Duration(v * float64(time.Second))
	case string:
		s := strings.TrimSpace(v)
		if s == "" {
			return int64(0)
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			d = time.Duration(f * float64(time.Second))
		} else if d, err = time.ParseDuration(s); err != nil {
			x.errorf(key, `want seconds or a duration like "90s" or "24h", got %q`, v)
			return v
		}
	default:
		x.errorf(key, `want seconds or a duration like "90s" or "24h", got %s`, describeValue(v))
		return v
	}
	if d < 0 {
		x.errorf(key, "must not be negative, got %s", describeValue(v))
		return v
	}
	return int64(d)
}

// describeType names what a key of Go type t wants, for messages.
func describeType(t reflect.Type) string {
	if t == durationType {
		return "a duration"
	}
	switch t.Kind() {
	case reflect.String:
		return "text"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings"
		}
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a table"
	}
	if t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 {
		return "an integer"
	}
	return t.String()
}

// describeValue names a decoded TOML value, for messages.
func describeValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case int64, float64, bool:
		return scalarString(v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "a list"
	}
	return fmt.Sprintf("%v", v)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
