//go:build linux

package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// sbxd ls frames a name holding a newline with NUL bytes (every name with
// -0), so no name can split an entry or forge one.
func TestLsFramesNames(t *testing.T) {
	dir := t.TempDir()
	evil := "evil\n41ed 0 0 FAKE_DIR"
	for _, name := range []string{evil, "plain", "sp ace"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("abc"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"ls", dir}, {"ls", "-0", dir}} {
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		records, complete := sbfiles.StatRecords([]byte(out))
		if !complete || len(records) != 3 {
			t.Fatalf("%v: %q: %d records (complete %v), want 3", args, out, len(records), complete)
		}
		names := map[string]bool{}
		for _, r := range records {
			fi, err := sbfiles.ParseStatLine(r)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() || fi.Size() != 3 {
				t.Errorf("%v: %q: mode %v size %d", args, r, fi.Mode(), fi.Size())
			}
			names[fi.Name()] = true
		}
		if !names[evil] || !names["plain"] || !names["sp ace"] {
			t.Errorf("%v: names %v", args, names)
		}
		if args[1] == "-0" && strings.Count(out, "\x00") != 6 {
			t.Errorf("ls -0: %q: want every record framed", out)
		}
	}
}

// The file commands exit with package backend's codes, and cat refuses a
// named pipe at once.
func TestFileCommandCodes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("content"), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(dir, "loop")
	os.Symlink("loop", loop)
	os.Symlink("f", filepath.Join(dir, "link"))
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"cat", file}, 0, "ok\ncontent"},
		{[]string{"cat", "/proc/self/cmdline"}, 0, "ok\n" + sbxd + "\x00cat\x00/proc/self/cmdline\x00"},
		{[]string{"cat", filepath.Join(dir, "nope")}, 102, ""},
		{[]string{"cat", dir}, 103, ""},
		{[]string{"cat", file + "/x"}, 105, ""},
		{[]string{"cat", fifo}, 107, ""},
		{[]string{"cat", "/dev/null"}, 107, ""},
		{[]string{"cat", loop}, 108, ""},
		{[]string{"stat", loop}, 108, ""},
		{[]string{"stat", filepath.Join(dir, "nope")}, 102, ""},
		{[]string{"ls", loop}, 108, ""},
		{[]string{"ls", file}, 105, ""},
		{[]string{"readlink", filepath.Join(dir, "link")}, 0, "f"},
		{[]string{"readlink", file}, 109, ""},
		{[]string{"readlink", filepath.Join(dir, "nope")}, 102, ""},
		{[]string{"stat"}, 125, ""},
		{[]string{"ls", "-x", dir}, 125, ""},
	} {
		start := time.Now()
		out, errOut, code := run(t, c.args...)
		if code != c.code || out != c.out {
			t.Errorf("sbxd %v: exit %d, %q (stderr %q); want %d, %q", c.args, code, out, errOut, c.code, c.out)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("sbxd %v took %v", c.args, d)
		}
	}
	out, _, code := run(t, "stat", filepath.Join(dir, "link"))
	records, _ := sbfiles.StatRecords([]byte(out))
	if code != 0 || len(records) != 1 || !strings.HasPrefix(out, "\x00") {
		t.Fatalf("sbxd stat of a link: exit %d, %q", code, out)
	}
	fi, err := sbfiles.ParseStatLine(records[0])
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 7 || fi.Name() != "link" {
		t.Errorf("sbxd stat of a link: %v %v", fi, err)
	}
}
