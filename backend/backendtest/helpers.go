package backendtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// mustExec execs req in sb and fails t if Exec returns an error or a non-zero
// exit code.
func mustExec(t *testing.T, ctx context.Context, sb backend.Sandbox, req backend.ExecRequest) backend.ExecResult {
	t.Helper()
	res, err := sb.Exec(ctx, req)
	if err != nil {
		t.Fatalf("Exec(%s): %v", describe(req), err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("Exec(%s): exit code %d, stderr %s", describe(req), res.ExitCode, quote(res.Stderr))
	}
	return res
}

// describe shows a request's command for failure messages.
func describe(req backend.ExecRequest) string {
	if req.Shell != "" {
		return strconv.Quote(req.Shell)
	}
	return fmt.Sprintf("%q", req.Cmd)
}

// quote shows output in failure messages, shortened when long.
func quote(b []byte) string {
	const limit = 300
	if len(b) > limit {
		return fmt.Sprintf("%q... (%d bytes)", b[:limit], len(b))
	}
	return strconv.Quote(string(b))
}

func checkOutput(t *testing.T, stream string, got []byte, want string) {
	t.Helper()
	if string(got) != want {
		t.Errorf("%s = %s, want %s", stream, quote(got), quote([]byte(want)))
	}
}

// checkBytes compares large contents by length and hash.
func checkBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) || !bytes.Equal(got, want) {
		t.Errorf("%s: got %d bytes (sha256 %s), want %d bytes (sha256 %s)",
			what, len(got), sum(got), len(want), sum(want))
	}
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// randomBytes returns n reproducible pseudo-random bytes.
func randomBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// yes returns the first n bytes that yes(1) prints.
func yes(n int) []byte {
	return bytes.Repeat([]byte("y\n"), n/2+1)[:n]
}

// checkErr fails t unless err wraps target.
func checkErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want one wrapping %q", what, err, target)
	}
}

// checkPathErr fails t unless err is an *fs.PathError wrapping target (any
// error when target is nil).
func checkPathErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want an *fs.PathError", what)
		return
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("%s: error %v, want one wrapping %q", what, err, target)
	}
	if _, ok := errors.AsType[*fs.PathError](err); !ok {
		t.Errorf("%s: error %v (%T) is not an *fs.PathError", what, err, err)
	}
}

// syncBuffer is an io.Writer for streamed output that the test reads while
// the command is still writing.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // signalled after each write
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{wrote: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// waitLine waits until the buffer holds a whole line starting with prefix
// and returns it. It gives up after d or when stop is closed.
func (b *syncBuffer) waitLine(prefix string, d time.Duration, stop <-chan struct{}) (string, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		if line, ok := b.line(prefix); ok {
			return line, true
		}
		select {
		case <-b.wrote:
		case <-stop:
			return b.line(prefix)
		case <-timer.C:
			return b.line(prefix)
		}
	}
}

func (b *syncBuffer) line(prefix string) (string, bool) {
	for line := range strings.Lines(string(b.Bytes())) {
		if strings.HasPrefix(line, prefix) && strings.HasSuffix(line, "\n") {
			return strings.TrimSuffix(line, "\n"), true
		}
	}
	return "", false
}

// treeScript starts a small process tree (the shell and two background
// sleeps) and prints "pids SHELL SLEEP SLEEP"; the caller appends what the
// shell does next.
const treeScript = `sleep 30 & a=$!; sleep 30 & b=$!; echo "pids $$ $a $b"`

// parsePIDs returns the pids from treeScript's line in out.
func parsePIDs(out []byte) []string {
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "pids" {
			return f[1:]
		}
	}
	return nil
}

// aliveScript prints those of its arguments that are running processes.
// Zombies count as gone: a container whose first process does not reap
// orphans keeps them until it is destroyed.
const aliveScript = `for p; do
  kill -0 "$p" 2>/dev/null || continue
  s=$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)
  [ "$s" = Z ] || [ "$s" = X ] || echo "$p"
done`

// checkGone fails t unless every process in pids has exited in sb. The
// processes were killed just before, so it polls for a few seconds (the
// kernel takes a moment to finish them); any still alive after that are
// reported and killed so they do not outlive the test.
func checkGone(t *testing.T, sb backend.Sandbox, pids []string) {
	t.Helper()
	if len(pids) == 0 {
		t.Error("no pids to check: the command's first line of output was lost")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), opTimeout)
	defer cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: append([]string{"sh", "-c", aliveScript, "sh"}, pids...)})
		if err != nil {
			t.Errorf("checking pids %v: %v", pids, err)
			return
		}
		alive := strings.Fields(string(res.Stdout))
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes %v of the command (pids %v: shell, sleep, sleep) still run after it ended", alive, pids)
			sb.Exec(ctx, backend.ExecRequest{Cmd: append([]string{"kill", "-KILL"}, alive...)})
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readAll reads a whole file through sbfiles.ReadFile, returning the error
// of opening or of reading.
func readAll(ctx context.Context, sb backend.Sandbox, name string) ([]byte, error) {
	rc, err := sbfiles.ReadFile(ctx, sb, name)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	return data, err
}

func writeFile(t *testing.T, ctx context.Context, sb backend.Sandbox, name string, data []byte, perm fs.FileMode) {
	t.Helper()
	if err := sbfiles.WriteFile(ctx, sb, name, bytes.NewReader(data), perm); err != nil {
		t.Fatalf("WriteFile(%q): %v", name, err)
	}
}

func readFile(t *testing.T, ctx context.Context, sb backend.Sandbox, name string) []byte {
	t.Helper()
	data, err := readAll(ctx, sb, name)
	if err != nil {
		t.Fatalf("ReadFile(%q): %v", name, err)
	}
	return data
}

func stat(t *testing.T, ctx context.Context, sb backend.Sandbox, name string) fs.FileInfo {
	t.Helper()
	fi, err := sbfiles.Stat(ctx, sb, name)
	if err != nil {
		t.Fatalf("Stat(%q): %v", name, err)
	}
	return fi
}

// mainLogs returns the last lines a sandbox's main command printed, as a
// suffix for a failure message ("" when the sandbox has no LogReader).
func mainLogs(ctx context.Context, sb backend.Sandbox) (string, error) {
	lr, ok := backend.As[backend.LogReader](sb)
	if !ok {
		return "", nil
	}
	out, err := lr.Logs(ctx, 20)
	if err != nil {
		return "", err
	}
	return "\nthe main command's last output:\n" + string(out), nil
}
