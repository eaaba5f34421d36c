package server

import (
	"regexp"
	"strings"
	"testing"
)

// The rule validConversation implements, as the regular expression it
// replaced.
var conversationRule = regexp.MustCompile(`^[A-Za-z0-9._:@/+=-]{1,200}$`)

func FuzzValidConversation(f *testing.F) {
	for _, s := range []string{"", "a", "alice@example.com/42", "a b", "é", "x\n", "../", strings.Repeat("a", 200), strings.Repeat("a", 201), "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := validConversation(id), conversationRule.MatchString(id); got != want {
			t.Errorf("validConversation(%q) = %v, the rule says %v", id, got, want)
		}
	})
}
