package fileops

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		noMatch []string
	}{
		{"*.go", []string{"a.go", ".x.go"}, []string{"a/b.go", "a.gox", "go"}},
		{"**/*.go", []string{"a.go", "a/b.go", "a/b/c/d.go"}, []string{"a/b.txt", "a.go/x"}},
		{"**", []string{"a", "a/b", "a/b/c"}, nil},
		{"a/**", []string{"a/b", "a/b/c", "a"}, []string{"b/a"}},
		{"a/**/b", []string{"a/b", "a/x/b", "a/x/y/b"}, []string{"a/x/c", "b", "x/a/b"}},
		{"**/x/**/*.txt", []string{"x/a.txt", "p/x/q/r/a.txt"}, []string{"x.txt", "p/y/a.txt"}},
		{"a/**/**/b", []string{"a/b", "a/1/2/b"}, []string{"a/c"}},
		{"src/*/main.go", []string{"src/cmd/main.go"}, []string{"src/main.go", "src/a/b/main.go"}},
		{"*.{go,ts}", []string{"a.go", "b.ts"}, []string{"c.js", "a.{go,ts}"}},
		{"{a,b/c}/*.md", []string{"a/x.md", "b/c/y.md"}, []string{"b/x.md"}},
		{"file-[0-9].txt", []string{"file-3.txt"}, []string{"file-a.txt"}},
		{"x?z", []string{"xyz"}, []string{"xz", "x/z"}},
		{`\*`, []string{"*"}, []string{"a"}},
		{"{x}.txt", []string{"{x}.txt"}, []string{"x.txt"}},
		{"./a/./b", []string{"a/b"}, nil},
	}
	for _, tt := range tests {
		p, err := compilePattern(tt.pattern)
		require.NoError(t, err, tt.pattern)
		for _, m := range tt.match {
			assert.True(t, p.Match(m), "%q should match %q", tt.pattern, m)
		}
		for _, m := range tt.noMatch {
			assert.False(t, p.Match(m), "%q should not match %q", tt.pattern, m)
		}
	}
}

func TestCompilePatternErrors(t *testing.T) {
	for _, p := range []string{"a[", "[]", "x/[a-/y"} {
		_, err := compilePattern(p)
		assert.Error(t, err, p)
	}
	_, err := compilePattern("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}")
	assert.ErrorContains(t, err, "too many brace alternatives")
}

func TestExpandBraces(t *testing.T) {
	tests := map[string][]string{
		"a":              {"a"},
		"{a,b}":          {"a", "b"},
		"x{a,b}y":        {"xay", "xby"},
		"{a,b}{1,2}":     {"a1", "a2", "b1", "b2"},
		"{a,{b,c}d}":     {"a", "bd", "cd"},
		"{a}":            {"{a}"},
		"{a":             {"{a"},
		`\{a,b}`:         {`\{a,b}`},
		"{,x}y":          {"y", "xy"},
		"{x}{a,b}":       {"{x}a", "{x}b"},
		"**/*.{ts,tsx}":  {"**/*.ts", "**/*.tsx"},
		"{src,test}/**":  {"src/**", "test/**"},
		"a{b,c{d,e}f}g":  {"abg", "acdfg", "acefg"},
		"{a,b}/{c,d}.go": {"a/c.go", "a/d.go", "b/c.go", "b/d.go"},
	}
	for in, want := range tests {
		got, err := expandBraces(in)
		require.NoError(t, err, in)
		assert.ElementsMatch(t, want, got, in)
	}
}

func TestSplitStatic(t *testing.T) {
	tests := []struct{ in, static, rest string }{
		{"*.go", "", "*.go"},
		{"a.go", "", "a.go"},
		{"src/**/*.go", "src", "**/*.go"},
		{"src/pkg/x.go", "src/pkg", "x.go"},
		{"a/{b,c}/d", "a", "{b,c}/d"},
		{"a/b?/c", "a", "b?/c"},
		{"../x/*", "../x", "*"},
	}
	for _, tt := range tests {
		s, r := splitStatic(tt.in)
		assert.Equal(t, tt.static, s, tt.in)
		assert.Equal(t, tt.rest, r, tt.in)
	}
}

func TestPatternHints(t *testing.T) {
	tests := []struct {
		pattern string
		depth   int
		last    string
		rec     bool
	}{
		{"*.go", 1, "*.go", false},
		{"*/*.go", 2, "*.go", false},
		{"**/*.go", 0, "*.go", true},
		{"**", 0, "", true},
		{"*.{go,ts}", 1, "", false},
		{"{a,b/c}/x.md", 0, "x.md", false},
		{"[ab].go", 1, "", false},
		{`a\*`, 1, "", false},
	}
	for _, tt := range tests {
		p, err := compilePattern(tt.pattern)
		require.NoError(t, err)
		assert.Equal(t, tt.depth, p.depth(), "depth of %q", tt.pattern)
		assert.Equal(t, tt.last, p.lastSegment(), "lastSegment of %q", tt.pattern)
		assert.Equal(t, tt.rec, p.recursive(), "recursive %q", tt.pattern)
	}
}

func TestFindArgs(t *testing.T) {
	assert.Equal(t, []string{"!", "-type", "d"}, findArgs("/w", listSpec{}))
	assert.Equal(t, []string{"-mindepth", "2", "-maxdepth", "2", "!", "-type", "d", "-name", "*.go"},
		findArgs("/w", listSpec{depth: 2, name: "*.go"}))
	assert.Equal(t, []string{"(", "-path", "/proc", "-o", "-path", "/sys", "-o", "-path", "/dev", ")", "-prune", "-o", "!", "-type", "d"},
		findArgs("/", listSpec{}))
	assert.Equal(t, []string{"(", "(", "-type", "d", "(", "-name", ".git", "-o", "-name", ".hg", "-o", "-name", ".svn", ")", ")", ")", "-prune", "-o", "-type", "f"},
		findArgs("/w", listSpec{regular: true, skipVCS: true}))
}

func TestParseListLine(t *testing.T) {
	e, ok := parseListLine("12 1700000000 /a/b c.txt")
	require.True(t, ok)
	assert.Equal(t, fileEntry{path: "/a/b c.txt", size: 12, mtime: 1700000000}, e)
	for _, bad := range []string{"", "12 1700000000", "x 1 /a", "1 y /a", "1 2 relative"} {
		_, ok := parseListLine(bad)
		assert.False(t, ok, bad)
	}
}

func TestRelTo(t *testing.T) {
	assert.Equal(t, "a/b", relTo("/", "/a/b"))
	assert.Equal(t, "b/c", relTo("/a", "/a/b/c"))
}
