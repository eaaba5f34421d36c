package fileops

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// maxBraceAlternatives bounds brace expansion ({a,b}{c,d} makes four).
const maxBraceAlternatives = 256

// pattern is a compiled glob pattern over slash-separated relative paths:
// each segment is a path.Match pattern, "**" as a whole segment matches zero
// or more segments, and {a,b} braces expand into alternatives.
type pattern struct {
	alts [][]string
}

// compilePattern compiles a relative glob pattern.
func compilePattern(p string) (*pattern, error) {
	alts, err := expandBraces(p)
	if err != nil {
		return nil, err
	}
	c := &pattern{}
	for _, a := range alts {
		segs := splitPattern(a)
		for _, s := range segs {
			if _, err := path.Match(s, ""); err != nil {
				return nil, fmt.Errorf("bad segment %q: %w", s, err)
			}
		}
		c.alts = append(c.alts, segs)
	}
	return c, nil
}

// splitPattern splits a relative pattern into segments, dropping empty and
// "." segments.
func splitPattern(p string) []string {
	var segs []string
	for s := range strings.SplitSeq(p, "/") {
		if s != "" && s != "." {
			segs = append(segs, s)
		}
	}
	return segs
}

// Match reports whether the relative, slash-separated path rel matches.
func (c *pattern) Match(rel string) bool {
	name := strings.Split(rel, "/")
	for _, a := range c.alts {
		if matchSegments(a, name) {
			return true
		}
	}
	return false
}

// recursive reports whether some alternative contains "**".
func (c *pattern) recursive() bool {
	for _, a := range c.alts {
		for _, s := range a {
			if s == "**" {
				return true
			}
		}
	}
	return false
}

// depth returns the number of segments every match has, or 0 when matches
// can have different depths.
func (c *pattern) depth() int {
	if c.recursive() {
		return 0
	}
	d := -1
	for _, a := range c.alts {
		if d >= 0 && len(a) != d {
			return 0
		}
		d = len(a)
	}
	return max(d, 0)
}

// lastSegment returns the last segment shared by every alternative when it
// can be handed to find -name as it is (no brackets or escapes, whose
// dialects differ; not "**"), else "".
func (c *pattern) lastSegment() string {
	last := ""
	for i, a := range c.alts {
		if len(a) == 0 {
			return ""
		}
		s := a[len(a)-1]
		if s == "**" || strings.ContainsAny(s, `[]\`) || (i > 0 && s != last) {
			return ""
		}
		last = s
	}
	return last
}

// matchSegments matches name segments against pattern segments, "**"
// matching any number (zero included) of whole segments.
func matchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 1 && pat[1] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 1 {
				return true
			}
			for i := 0; i <= len(name); i++ {
				if matchSegments(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// hasMagic reports whether s has glob syntax.
func hasMagic(s string) bool { return strings.ContainsAny(s, `*?[{\`) }

// splitStatic splits a pattern into its leading segments without glob
// syntax (a directory to start walking from) and the rest. The last segment
// always stays in rest, so rest is never empty for a non-empty pattern.
func splitStatic(p string) (static, rest string) {
	segs := strings.Split(p, "/")
	i := 0
	for i < len(segs)-1 && !hasMagic(segs[i]) {
		i++
	}
	return strings.Join(segs[:i], "/"), strings.Join(segs[i:], "/")
}

// expandBraces expands {a,b} alternatives, nested ones included. A brace
// without a matching close or without a comma is literal, as in bash.
func expandBraces(p string) ([]string, error) {
	out := []string{p}
	for {
		var next []string
		changed := false
		for _, s := range out {
			alts, ok := expandFirstBrace(s)
			if !ok {
				next = append(next, s)
				continue
			}
			changed = true
			next = append(next, alts...)
			if len(next) > maxBraceAlternatives {
				return nil, errors.New("too many brace alternatives")
			}
		}
		out = next
		if !changed {
			return out, nil
		}
	}
}

// expandFirstBrace expands the first brace group in s that has a comma at
// its top level.
func expandFirstBrace(s string) ([]string, bool) {
	for open := 0; open < len(s); open++ {
		switch s[open] {
		case '\\':
			open++
			continue
		case '{':
		default:
			continue
		}
		depth, commas := 0, []int{}
		for i := open; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '{':
				depth++
			case ',':
				if depth == 1 {
					commas = append(commas, i)
				}
			case '}':
				depth--
				if depth > 0 {
					continue
				}
				if len(commas) == 0 {
					break // "{x}" is literal; look for a later group
				}
				var alts []string
				start := open + 1
				for _, c := range append(commas, i) {
					alts = append(alts, s[:open]+s[start:c]+s[i+1:])
					start = c + 1
				}
				return alts, true
			}
			if depth == 0 {
				break
			}
		}
	}
	return nil, false
}
