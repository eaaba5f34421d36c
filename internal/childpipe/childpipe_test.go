//go:build linux

package childpipe

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nonblocking reports whether f's descriptor is in non-blocking mode.
func nonblocking(t *testing.T, f *os.File) bool {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	var ferr error
	rc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		flags = int(r)
		if e != 0 {
			ferr = e
		}
	})
	if ferr != nil {
		t.Fatal(ferr)
	}
	return flags&syscall.O_NONBLOCK != 0
}

func TestEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func() (*os.File, *os.File, error)
	}{{"output", ForOutput}, {"input", ForInput}} {
		t.Run(tc.name, func(t *testing.T) {
			parent, child, err := tc.make()
			if err != nil {
				t.Fatal(err)
			}
			defer parent.Close()
			defer child.Close()
			if !nonblocking(t, parent) {
				t.Error("the parent's end is blocking: it cannot have deadlines")
			}
			if nonblocking(t, child) {
				t.Error("the child's end is non-blocking: a child would see EAGAIN on its standard streams")
			}
			// The parent's end is polled: a deadline ends a read or write
			// that would wait.
			parent.SetDeadline(time.Now().Add(20 * time.Millisecond))
			var perr error
			if tc.name == "output" {
				_, perr = parent.Read(make([]byte, 1))
			} else {
				buf := make([]byte, 1<<20) // more than a pipe holds
				_, perr = parent.Write(buf)
			}
			if !os.IsTimeout(perr) {
				t.Errorf("parent's end past its deadline: %v, want a timeout", perr)
			}
		})
	}
}

func TestChildGetsThem(t *testing.T) {
	outR, outW, err := ForOutput()
	if err != nil {
		t.Fatal(err)
	}
	inW, inR, err := ForInput()
	if err != nil {
		t.Fatal(err)
	}
	null, err := DevNull()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := DevNull(); again != null {
		t.Error("DevNull opened /dev/null twice")
	}
	// cat copies its stdin to its stdout; a second command reads
	// /dev/null as its stdin and must see it end at once.
	cat := exec.Command("cat")
	cat.Stdin, cat.Stdout = inR, outW
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	go func() {
		io.WriteString(inW, "through both pipes\n")
		inW.Close()
	}()
	got, err := io.ReadAll(outR)
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Wait(); err != nil {
		t.Fatal(err)
	}
	if string(got) != "through both pipes\n" {
		t.Errorf("cat wrote %q", got)
	}
	wc := exec.Command("wc", "-c")
	wc.Stdin = null
	out, err := wc.Output()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("wc -c of DevNull: %q, %v", out, err)
	}
	// DevNull stays open for the next command.
	wc = exec.Command("wc", "-c")
	wc.Stdin = null
	if out, err := wc.Output(); err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("second wc -c of DevNull: %q, %v", out, err)
	}
}
