package agent

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// globPattern is a compiled glob: alternatives from {a,b} braces, each a
// list of segments matched with path.Match, where a "**" segment matches
// any number of directories (zero included).
type globPattern struct {
	alts [][]string
}

// maxBraceAlternatives bounds what {a,b} expansion may produce.
const maxBraceAlternatives = 1024

func compileGlob(p string) (*globPattern, error) {
	if p == "" {
		return nil, errors.New("empty pattern")
	}
	alts, err := expandBraces(p)
	if err != nil {
		return nil, err
	}
	g := &globPattern{}
	for _, a := range alts {
		segs := strings.Split(strings.Trim(a, "/"), "/")
		for _, s := range segs {
			if strings.Contains(s, "**") && s != "**" {
				return nil, fmt.Errorf("%q: ** must be a whole path segment", s)
			}
			if _, err := path.Match(s, ""); err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
		}
		g.alts = append(g.alts, segs)
	}
	return g, nil
}

// expandBraces turns "a{b,c}d" into "abd", "acd" (nested braces allowed).
func expandBraces(p string) ([]string, error) {
	open := -1
	depth := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case '}':
			if depth == 0 {
				continue
			}
			depth--
			if depth > 0 {
				continue
			}
			var out []string
			for _, alt := range splitTop(p[open+1 : i]) {
				rest, err := expandBraces(p[:open] + alt + p[i+1:])
				if err != nil {
					return nil, err
				}
				out = append(out, rest...)
				if len(out) > maxBraceAlternatives {
					return nil, fmt.Errorf("more than %d alternatives", maxBraceAlternatives)
				}
			}
			return out, nil
		}
	}
	if depth != 0 {
		return nil, errors.New("unclosed {")
	}
	return []string{p}, nil
}

// splitTop splits s at commas outside nested braces.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// match reports whether the slash-separated relative path rel matches.
func (g *globPattern) match(rel string) bool {
	name := strings.Split(rel, "/")
	for _, a := range g.alts {
		if matchSegments(a, name) {
			return true
		}
	}
	return false
}

// matchSegments matches segment by segment in O(len(pat)*len(name)): a
// row of "pat[:i] matches name[:j]" per pattern segment, so patterns with
// many "**" cannot make it exponential.
func matchSegments(pat, name []string) bool {
	row := make([]bool, len(name)+1)
	row[0] = true
	next := make([]bool, len(name)+1)
	for _, p := range pat {
		clear(next)
		if p == "**" {
			seen := false
			for j := range row {
				seen = seen || row[j]
				next[j] = seen
			}
		} else {
			for j := 1; j <= len(name); j++ {
				if row[j-1] {
					next[j], _ = path.Match(p, name[j-1])
				}
			}
		}
		row, next = next, row
	}
	return row[len(name)]
}

// maxDepth is how deep below the base a match can lie (0: any depth).
func (g *globPattern) maxDepth() int {
	d := 0
	for _, a := range g.alts {
		for _, s := range a {
			if s == "**" {
				return 0
			}
		}
		d = max(d, len(a))
	}
	return d
}

// staticPrefix is the leading segments without glob syntax that every
// alternative shares, so a walk can start there.
func (g *globPattern) staticPrefix() string {
	var prefix []string
	for i := 0; ; i++ {
		var seg string
		for j, a := range g.alts {
			if i >= len(a)-1 || strings.ContainsAny(a[i], `*?[\`) {
				return strings.Join(prefix, "/")
			}
			if j == 0 {
				seg = a[i]
			} else if a[i] != seg {
				return strings.Join(prefix, "/")
			}
		}
		prefix = append(prefix, seg)
	}
}
