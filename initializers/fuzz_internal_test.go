package initializers

import "testing"

// parseArvo reads OpenSage's way: only unindented `export NAME=` lines,
// the last one of a name winning, double quotes dropped; the target from
// the first indented "/out/<t> /tmp/poc" line.
func TestParseArvo(t *testing.T) {
	s, err := parseArvo("export SANITIZER=memory\r\n  export ARCHITECTURE=ignored\nexport ARCHITECTURE=aarch64\n" +
		"export FUZZING_LANGUAGE=\" rust\"\nexport SANITIZER=address\n/out/unindented /tmp/poc\n\t/out/first /tmp/poc\n  /out/second /tmp/poc\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"SANITIZER": "address", "ARCHITECTURE": "aarch64", "FUZZING_LANGUAGE": " rust"}
	for k, v := range want {
		if s.env[k] != v {
			t.Errorf("%s = %q, want %q", k, s.env[k], v)
		}
	}
	if s.target != "first" {
		t.Errorf("target %q, want first", s.target)
	}
	if _, err := parseArvo("  export SANITIZER=address\nexport FUZZING_LANGUAGE=c\nexport ARCHITECTURE=x86_64\n"); err == nil {
		t.Error("an indented export is not read: want an error naming SANITIZER")
	}
}
