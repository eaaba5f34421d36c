package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sandboxkit/sandboxkit/backend"
)

// configError is a config problem. Its text names the file and key; it
// unwraps to a sentinel (backend.ErrInvalidConfig, or errors.ErrUnsupported
// for options this version cannot carry out) without repeating its text.
type configError struct {
	msg      string
	sentinel error
}

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return e.sentinel }

// invalidf returns an error wrapping backend.ErrInvalidConfig.
func invalidf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...), sentinel: backend.ErrInvalidConfig}
}

// parser turns one file into a Config, collecting every problem so that a
// single run of `sbx config check` reports them all.
type parser struct {
	reg  *Registry
	cfg  *Config
	vars map[string]string
	errs []error
	// elsewhere: a backend of another build (Registry.Elsewhere) the file
	// selects or configures; parse then fails with an *ElsewhereError.
	elsewhere string
}

// errorf records a problem at key (dotted, as in the file).
func (p *parser) errorf(key, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if key != "" {
		msg = key + ": " + msg
	}
	p.errs = append(p.errs, invalidf("%s: %s", p.cfg.Describe(), msg))
}

func (p *parser) warnf(format string, args ...any) {
	p.cfg.Warnings = append(p.cfg.Warnings, fmt.Sprintf(format, args...))
}

// err is the parse's outcome: an *ElsewhereError for a file that names a
// backend of another build (that build parses it again and says all),
// else the problems found.
func (p *parser) err() error {
	if p.elsewhere != "" {
		return &ElsewhereError{Backend: p.elsewhere}
	}
	return errors.Join(p.errs...)
}

// backendTable is a [sandbox.NAME] table of a registered backend.
type backendTable struct {
	key     string // as written (may be an alias)
	backend string // registered name
	factory backend.Factory
	data    any
}

func (p *parser) parse(data []byte) error {
	// Pass 1: the whole file, untyped. Only [sandbox] is ours.
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		p.errorf("", "%v", err)
		return p.err()
	}
	p.vars = templateVars(doc)
	p.decodeBuild(doc)
	p.decodeMCP(doc)
	p.decodeSecureRuntime(doc)

	sbx := map[string]any{}
	switch v := doc["sandbox"].(type) {
	case nil:
		p.cfg.noSandboxTable = true
	case map[string]any:
		sbx = v
	default:
		p.errorf("sandbox", "want a table, got %s", describeValue(v))
		return p.err()
	}

	tables := p.splitBackendTables(sbx)

	// Pass 2: expand templates and coerce by target type, then decode
	// strictly into the typed structs.
	sc := SandboxConfig{
		Backend:     DefaultBackend,
		DefaultTTL:  DefaultTTL,
		ToolsConfig: ToolsConfig{ExecuteTimeout: DefaultExecuteTimeout},
		Paths: PathsConfig{
			MemRoot: "/mem", Shared: "/shared", BashTools: "/bash_tools",
			SandboxScripts: "/sandbox_scripts", Src: "/src",
		},
	}
	p.decodeStrict(sbx, toml.Key{"sandbox"}, &sc, p.backendCandidates())
	p.cfg.backends = map[string]any{}
	for _, bt := range tables {
		cfgPtr := bt.factory.NewConfig()
		table, ok := bt.data.(map[string]any)
		if !ok {
			p.errorf(toml.Key{"sandbox", bt.key}.String(), "want a table, got %s", describeValue(bt.data))
			continue
		}
		p.decodeStrict(table, toml.Key{"sandbox", bt.key}, cfgPtr, nil)
		p.cfg.backends[bt.backend] = cfgPtr
	}
	if len(p.errs) > 0 {
		return p.err()
	}
	p.cfg.Sandbox = sc
	if err := p.cfg.resolveProjectRoot(); err != nil {
		p.errs = append(p.errs, err)
		return p.err()
	}

	p.checkBackend()
	_, p.cfg.ttlWritten = sbx["default_ttl"]
	p.cfg.reg = p.reg
	p.cfg.applyBackend()
	p.checkHostSharedMemDir()
	if w := p.cfg.SharedDataWarning(); w != "" {
		p.warnf("%s", w)
	}
	p.finishEntries()
	p.checkMCPServices()
	p.warnOpenSageCacheVars()
	return p.err()
}

// splitBackendTables removes the [sandbox.NAME] tables of backends from sbx
// (they are decoded into the backends' own config types) and warns about the
// tables of backends not built into this version. What remains is decoded
// into SandboxConfig, so any other table is an unknown key.
func (p *parser) splitBackendTables(sbx map[string]any) []backendTable {
	var tables []backendTable
	seen := map[string]string{} // backend -> table key
	// Known before templates are expanded, so that a file with other
	// problems is handed over too (checkBackend sees expanded values).
	if v, ok := sbx["backend"].(string); ok {
		p.noteElsewhere(v)
	}
	for _, k := range sortedKeys(sbx) {
		if slices.Contains(sandboxKeys(), k) {
			continue
		}
		name, f, ok := p.reg.resolve(k)
		switch {
		case ok && f.NewConfig == nil:
			p.errorf(toml.Key{"sandbox", k}.String(), "the %s backend takes no settings (remove the table)", name)
		case ok && seen[name] != "":
			p.errorf(toml.Key{"sandbox", k}.String(), "[sandbox.%s] and [sandbox.%s] both configure the %s backend (keep one)", seen[name], k, name)
		case ok:
			seen[name] = k
			tables = append(tables, backendTable{key: k, backend: name, factory: f, data: sbx[k]})
		case p.noteElsewhere(k):
		case p.reg.isPlanned(k):
			p.warnf("%s: not checked: the %s backend is not built into this version of sandboxkit", toml.Key{"sandbox", k}, k)
		default:
			continue // an unknown key, reported by decodeStrict
		}
		delete(sbx, k)
	}
	return tables
}

// noteElsewhere records name when it is a backend of another build
// (Registry.Elsewhere), and says whether it was.
func (p *parser) noteElsewhere(name string) bool {
	e := p.reg.elsewhereName(name)
	if e != "" {
		p.elsewhere = e
	}
	return e != ""
}

// backendCandidates are the table names did-you-mean offers in [sandbox].
func (p *parser) backendCandidates() []string {
	return slices.Concat(p.reg.knownNames(), p.reg.plannedNames())
}

// checkBackend accepts a registered backend, warns about one that is planned
// but not built in (so OpenSage files load; Open will refuse it), and
// rejects anything else.
func (p *parser) checkBackend() {
	sc := &p.cfg.Sandbox
	if sc.Backend == "" {
		sc.Backend = DefaultBackend
	}
	if _, _, ok := p.reg.resolve(sc.Backend); ok || sc.Backend == AutoBackend {
		return
	}
	if p.noteElsewhere(sc.Backend) {
		return
	}
	known := strings.Join(p.reg.knownNames(), ", ")
	if p.reg.isPlanned(sc.Backend) {
		p.warnf("sandbox.backend: the %s backend is not built into this version of sandboxkit (known: %s); opening it will fail",
			sc.Backend, known)
		return
	}
	p.errorf("sandbox.backend", "unknown backend %q (known: %s)%s", sc.Backend, known,
		DidYouMean(sc.Backend, slices.Concat(p.reg.knownNames(), p.reg.plannedNames())))
}

// finishEntries names the entries and checks each one by building its Spec,
// so that malformed volumes, ports, sizes or commands fail at load time.
func (p *parser) finishEntries() {
	c := p.cfg
	for _, spec := range c.Sandbox.MountHostPaths {
		switch _, skip, err := parseVolumeOn(spec, hostPaths{dir: c.Dir, remote: c.remoteHostPaths}); {
		case err != nil:
			p.errorf("sandbox.mount_host_paths", "volume %q: %v", spec, err)
		case skip != "" && c.makesHostPaths():
			p.warnf("sandbox.mount_host_paths: volume %q: %s: made (0755) when a sandbox is made, as Docker makes it for OpenSage", spec, skip)
		case skip != "":
			p.warnf("sandbox.mount_host_paths: volume %q: %s (skipped)", spec, skip)
		}
	}
	if c.Sandbox.Sandboxes == nil {
		c.Sandbox.Sandboxes = map[string]*Entry{}
	}
	for _, name := range c.SandboxNames() {
		e := c.Sandbox.Sandboxes[name]
		if e == nil {
			e = &Entry{}
			c.Sandbox.Sandboxes[name] = e
		}
		e.Name = name
		if e.Type == "" {
			e.Type = name
		}
		e.dir, e.root = c.Dir, c.ProjectRoot
		_, warnings, problems := c.buildSpec(e, true)
		for _, w := range warnings {
			p.warnf("%s", w)
		}
		for _, pr := range problems {
			p.errorf("", "%s", pr)
		}
	}
	p.warnTimeouts()
}

// warnTimeouts names, once for the file, the entries that set OpenSage's
// timeout: its Docker client's timeout per API call, which has no
// counterpart here (each step has a deadline of its own).
func (p *parser) warnTimeouts() {
	var keys []string
	for _, name := range p.cfg.SandboxNames() {
		if e := p.cfg.Sandbox.Sandboxes[name]; e.Timeout != 0 {
			keys = append(keys, entryKey(name).String()+".timeout")
		}
	}
	if len(keys) == 0 {
		return
	}
	p.warnf("%s: OpenSage's Docker client timeout per API call, which sandboxkit does not use (ignored): "+
		"each step has its own deadline (a pull or build as long as it takes, provisioning and readiness initializer_timeout_sec, "+
		"commands their exec timeout)", strings.Join(keys, ", "))
}

// decodeStrict expands templates in data, decodes it into v (a pointer) and
// reports every key v has no place for, with its full dotted path.
func (p *parser) decodeStrict(data map[string]any, prefix toml.Key, v any, rootCandidates []string) {
	before := len(p.errs)
	x := expander{vars: p.vars}
	expanded := x.expand(data, reflect.TypeOf(v), prefix)
	for _, e := range x.errs {
		p.errorf("", "%s", e)
	}
	if len(p.errs) > before {
		return
	}
	buf, err := toml.Marshal(expanded)
	if err != nil {
		p.errorf(prefix.String(), "%v", err)
		return
	}
	md, err := toml.Decode(string(buf), v)
	if err != nil {
		key, msg := splitDecodeError(err)
		p.errorf(join(prefix, key), "%s", msg)
		return
	}
	var reported []toml.Key
	for _, k := range md.Undecoded() {
		if slices.ContainsFunc(reported, func(r toml.Key) bool { return hasPrefix(k, r) }) {
			continue
		}
		if _, raw, ok := typeAt(reflect.TypeOf(v), k); ok || raw {
			continue
		}
		reported = append(reported, k)
		candidates := keysAt(reflect.TypeOf(v), k[:len(k)-1])
		if len(k) == 1 {
			candidates = append(candidates, rootCandidates...)
		}
		full := slices.Concat(prefix, k)
		p.errs = append(p.errs, invalidf("%s: unknown key %q%s", p.cfg.Describe(), full.String(),
			DidYouMean(k[len(k)-1], candidates)))
	}
}

// decodeErrorRE matches BurntSushi's type errors, which carry the key but
// not as a field: `toml: line 3 (last key "a.b"): message`.
var decodeErrorRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^toml: (?:line \d+ )?\(last key "(.*?)"\): (.*)$`) })

// splitDecodeError returns the key and message of a decode error. Line
// numbers are dropped: they refer to the re-encoded [sandbox] table, not
// to the user's file.
func splitDecodeError(err error) (key, msg string) {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return pe.LastKey, pe.Message
	}
	if m := decodeErrorRE().FindStringSubmatch(err.Error()); m != nil {
		return m[1], m[2]
	}
	return "", strings.TrimPrefix(err.Error(), "toml: ")
}

func join(prefix toml.Key, key string) string {
	if key == "" {
		return prefix.String()
	}
	return prefix.String() + "." + key
}

func hasPrefix(k, prefix toml.Key) bool {
	return len(k) >= len(prefix) && slices.Equal(k[:len(prefix)], prefix)
}

// --- reflection over the config structs, matching BurntSushi's rules ---

var (
	unmarshalerType = reflect.TypeFor[toml.Unmarshaler]()
	durationType    = reflect.TypeFor[time.Duration]()
)

type tomlField struct {
	name string
	typ  reflect.Type
}

// fieldsOf lists the TOML keys of struct type t: the `toml` tag or the field
// name; untagged embedded structs are flattened, tagged ones are tables.
func fieldsOf(t reflect.Type) []tomlField {
	var out []tomlField
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if tag == "-" {
			continue
		}
		ft := f.Type
		if f.Anonymous && tag == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, fieldsOf(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, tomlField{tag, ft})
	}
	return out
}

// fieldFor finds key in struct type t as BurntSushi does: exact name first,
// then case-insensitively.
func fieldFor(t reflect.Type, key string) (reflect.Type, bool) {
	fields := fieldsOf(t)
	for _, f := range fields {
		if f.name == key {
			return f.typ, true
		}
	}
	for _, f := range fields {
		if strings.EqualFold(f.name, key) {
			return f.typ, true
		}
	}
	return nil, false
}

// isRaw reports whether values of type t are kept as written (any) or decode
// themselves (toml.Unmarshaler): no coercion, no unknown-key check inside.
func isRaw(t reflect.Type) bool {
	return t.Kind() == reflect.Interface || t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType)
}

// elemType strips pointers and slices: TOML key paths do not count array
// indexes.
func elemType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	return t
}

// typeAt resolves key path k below type t. raw reports that the path runs
// into a raw value (whose inner keys are never unknown); ok that the key has
// a place in t.
func typeAt(t reflect.Type, k toml.Key) (_ reflect.Type, raw, ok bool) {
	for _, part := range k {
		t = elemType(t)
		if isRaw(t) {
			return t, true, false
		}
		switch t.Kind() {
		case reflect.Struct:
			if t, ok = fieldFor(t, part); !ok {
				return nil, false, false
			}
		case reflect.Map:
			t = t.Elem()
		default:
			return nil, false, false
		}
	}
	return t, false, true
}

// keysAt lists the keys of the table at path k below t (for did-you-mean).
func keysAt(t reflect.Type, k toml.Key) []string {
	t, raw, ok := typeAt(t, k)
	if !ok || raw {
		return nil
	}
	if t = elemType(t); t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for _, f := range fieldsOf(t) {
		names = append(names, f.name)
	}
	return names
}

// sandboxKeys are the keys of [sandbox] itself (not backend tables).
var sandboxKeys = sync.OnceValue(func() []string {
	return keysAt(reflect.TypeFor[SandboxConfig](), nil)
})

// DidYouMean suggests the closest candidate to a misspelt key, if one is
// close enough to be a typo.
func DidYouMean(key string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(key), strings.ToLower(c))
		if d <= max(1, len(c)/3) && (best == "" || d < bestD) {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and swaps of neighbours each cost 1.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// DecodeExtra decodes entry e's [extra] table into v, an initializer's
// config: the keys v takes are type-checked (a wrong type is an error
// naming the key); every other key is left to the backends and other tools
// that read it, as OpenSage's free [extra] map is (ExtraWarnings names the
// keys nothing selected reads).
func (c *Config) DecodeExtra(e *Entry, v any) error {
	p := &parser{cfg: c}
	data := maps.Clone(e.Extra)
	if data == nil {
		data = map[string]any{}
	}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	maps.DeleteFunc(data, func(k string, _ any) bool {
		_, known := fieldFor(t, k)
		return !known
	})
	c.applyBuildDefaults(v)
	p.decodeStrict(data, slices.Concat(entryKey(e.Name), toml.Key{"extra"}), v, nil)
	return p.err()
}

// Keys returns the TOML keys that v, a config struct or a pointer to one,
// takes at its top level (the keys of embedded structs included), in field
// order: for documentation and its tests.
func Keys(v any) []string {
	var keys []string
	for _, f := range fieldsOf(elemType(reflect.TypeOf(v))) {
		keys = append(keys, f.name)
	}
	return keys
}
