package stdinpipe

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/childpipe"
)

// start starts cmd with src on its stdin, as Exec does.
func start(t *testing.T, cmd *exec.Cmd, src io.Reader) *Pipe {
	t.Helper()
	p, err := Set(cmd, src)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Start()
	p.Started(err)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A command reads what the reader holds.
func TestFeeds(t *testing.T) {
	cmd := exec.Command("cat")
	var out bytes.Buffer
	cmd.Stdout = &out
	p := start(t, cmd, strings.NewReader("hello\n"))
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if out.String() != "hello\n" {
		t.Errorf("cat printed %q", out.String())
	}
}

// A command that exits without reading its stdin is not held up by a
// reader that never ends, and Close ends the copy.
func TestUnreadStdin(t *testing.T) {
	pr, pw := io.Pipe() // never written to: Read blocks
	defer pw.Close()
	cmd := exec.Command("true")
	p := start(t, cmd, pr)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait waited for stdin")
	}
	p.Close()
}

// Nothing to feed, a file and a command that did not start.
func TestNilFileAndFailedStart(t *testing.T) {
	cmd := exec.Command("true")
	null, err := childpipe.DevNull()
	if err != nil {
		t.Fatal(err)
	}
	if p, err := Set(cmd, nil); p != nil || err != nil || cmd.Stdin != null {
		t.Errorf("Set(nil) = %v, %v; stdin %v, want the shared /dev/null", p, err, cmd.Stdin)
	}
	var nilPipe *Pipe
	nilPipe.Started(nil)
	nilPipe.Close()

	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p, err := Set(cmd, f); p != nil || err != nil || cmd.Stdin != f {
		t.Errorf("Set(file) = %v, %v; stdin %v, want the file itself", p, err, cmd.Stdin)
	}

	bad := exec.Command("/nonexistent/program")
	p, err := Set(bad, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Start()
	if err == nil {
		t.Fatal("a missing program started")
	}
	p.Started(err)
	if _, err := p.pw.Write([]byte("x")); err == nil {
		t.Error("the pipe is still open after a failed start")
	}
}
