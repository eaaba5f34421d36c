package main

import (
	"strconv"
	"testing"
)

// The fuzz targets cover what gdbmcp reads from gdb: MI records, and the
// exit codes in them.
//
//	go test -run '^$' -fuzz '^FuzzParseRecord$' -fuzztime 30s ./cmd/gdbmcp/

// FuzzParseRecord: any line parses or is refused, without panic; a stop
// record's frame renders; a console record of quoteMI(s) reads back as s.
func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{
		`12*stopped,reason="signal-received",signal-name="SIGSEGV",frame={addr="0x1",func="crash",args=[{name="line",value="0x2 \"boom\\n\""}],file="crash.c",line="9"},thread-id="1"`,
		`^done,stack=[frame={level="0",func="a"},frame={level="1",func="b"}]`,
		`~"Breakpoint 1 at 0x1: file a.c, line 3.\n"`,
		`*stopped,reason="exited",exit-code="0377"`,
		`=thread-group-exited,id="i1"`,
		`^error,msg="No symbol \"x\" in current context."`,
		`&"\101\7\0"`,
		"(gdb) ",
		`^done,a=[b=[c={d="e"}]]`,
		`^done,x=`,
	} {
		f.Add(s, "text \"with\" \\ and\nnewline\t\x00\xff")
	}
	f.Fuzz(func(t *testing.T, line, s string) {
		r, ok := parseRecord(line)
		if ok && r.class == "stopped" {
			describeStop(r)
		}
		if fr, ok := r.vals["frame"].(map[string]any); ok {
			describeFrame(fr)
		}
		r, ok = parseRecord("~" + quoteMI(s))
		if !ok || r.text != s {
			t.Fatalf("console record of %q read back as %q (ok %v)", s, r.text, ok)
		}
	})
}

// FuzzExitCode: an octal exit code reads back in decimal; anything else is
// shown as it came.
func FuzzExitCode(f *testing.F) {
	for _, s := range []string{"0", "012", "0377", "1", "9", "", "0x1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := exitCode(s)
		n, err := strconv.ParseUint(s, 8, 32)
		if err != nil {
			if got != s {
				t.Fatalf("exitCode(%q) = %q, want it unchanged", s, got)
			}
			return
		}
		if got != strconv.FormatUint(n, 10) {
			t.Fatalf("exitCode(%q) = %q, want %d", s, got, n)
		}
	})
}
