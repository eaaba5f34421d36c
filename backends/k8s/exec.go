//lint:file-ignore SA1019 client-go's dialers (portforward, remotecommand) still take and give apimachinery's httpstream types

package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/sandboxkit/sandboxkit/internal/execframe"
)

// stream runs argv in a pod's container through the API server's
// exec subresource (WebSocket, falling back to SPDY for servers before
// Kubernetes 1.30) and returns its exit code. Output goes to stdout and
// stderr until stream returns; stdin, when not nil, is copied in and closed
// at its EOF.
//
// The exec API has no kill: cancelling ctx only drops the connection, and
// the command keeps running in the pod. Callers wrap commands in sbxd exec
// and kill them with sbxd kill (see Sandbox.kill).
func (b *Backend) stream(ctx context.Context, pod, container string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return b.execStream(ctx, pod, container, argv, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// execStream is stream with every option of the exec subresource's
// stream (a terminal: Tty and TerminalSizeQueue, stdout only).
func (b *Backend) execStream(ctx context.Context, pod, container string, argv []string, so remotecommand.StreamOptions) (int, error) {
	u, err := b.subresourceURL(pod, "exec", &corev1.PodExecOptions{
		Container: container,
		Command:   argv,
		Stdin:     so.Stdin != nil,
		Stdout:    so.Stdout != nil,
		Stderr:    so.Stderr != nil,
		TTY:       so.Tty,
	})
	if err != nil {
		return -1, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(b.rest, http.MethodGet, u.String())
	if err != nil {
		return -1, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.rest, http.MethodPost, u)
	if err != nil {
		return -1, err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, err
	}
	err = ex.StreamWithContext(ctx, so)
	if err == nil {
		return 0, nil
	}
	if ee, ok := errors.AsType[utilexec.ExitError](err); ok {
		return ee.ExitStatus(), nil
	}
	if ctx.Err() != nil {
		return -1, context.Cause(ctx)
	}
	return -1, b.translate(err)
}

// gate passes writes on to the caller's writers until closed, one at a
// time: client-go copies stdout and stderr from two goroutines (the caller
// may have given the same writer for both), and those goroutines may still
// run after a cancelled stream returned.
type gate struct {
	mu     sync.Mutex
	closed bool
}

func (g *gate) writer(w io.Writer) io.Writer { return gatedWriter{g, w} }

// close stops every write; it returns once a write in progress is done.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

type gatedWriter struct {
	g *gate
	w io.Writer
}

func (w gatedWriter) Write(p []byte) (int, error) {
	w.g.mu.Lock()
	defer w.g.mu.Unlock()
	if w.g.closed {
		return 0, io.ErrClosedPipe
	}
	return w.w.Write(p)
}

// envScript runs "$@" with environment assignments and a working
// directory, which the exec API cannot set: sh -c envScript sh DIR N
// K=V... ARGV...
const envScript = `d=$1; n=$2; shift 2
while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n-1)); done
if [ -n "$d" ]; then cd -- "$d" || exit 126; fi
exec "$@"`

// withEnv wraps argv in envScript when env or dir is set.
func withEnv(argv []string, env map[string]string, dir string) []string {
	if len(env) == 0 && dir == "" {
		return argv
	}
	out := []string{"/bin/sh", "-c", envScript, "sh", dir, strconv.Itoa(len(env))}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return append(out, argv...)
}

// checkEnv refuses environment names sh cannot export.
func checkEnv(env map[string]string) error {
	for k := range env {
		if k == "" || !isName(k) {
			return fmt.Errorf("environment variable name %q: want letters, digits and _, not starting with a digit", k)
		}
	}
	return nil
}

func isName(s string) bool {
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// sbxdFramed reports whether an sbxd of version v (what sbxd version
// printed after "sbxd ") has exec --framed.
func sbxdFramed(v string) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= execframe.FramedSince
}

// streamFramed is stream for a command under sbxd exec --framed: its
// output and exit code arrive framed on stdout (internal/execframe), and
// stdin stays open until the exit frame came, so sbxd, which exits only
// when stdin closes, cannot end the exec while output is still on its
// way. (The API server closes the connection when the command exits; with
// the client's unread pings in its socket, the kernel then resets the
// connection and drops what was not sent yet: a slow reader lost the end
// of a long output.) Once the exit frame arrived, a failure of the
// connection no longer matters.
func (s *Sandbox) streamFramed(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	exited := make(chan struct{})
	in := execframe.NewStdin(stdin, exited)
	defer in.Close()
	pr, pw := io.Pipe()
	type demuxed struct {
		code int
		err  error
	}
	dm := make(chan demuxed, 1)
	go func() {
		code, err := execframe.Demux(pr, stdout, stderr)
		if err == nil {
			close(exited)
		}
		// Nothing follows the exit frame; on an error, the stream's
		// writes fail and it ends.
		pr.CloseWithError(io.ErrClosedPipe)
		dm <- demuxed{code, err}
	}()
	code, err := s.stream(ctx, argv, in, pw, stderr)
	pw.Close()
	d := <-dm
	switch {
	case d.err == nil:
		return d.code, nil
	case err != nil:
		return code, err
	case errors.Is(d.err, io.ErrUnexpectedEOF) && code != 0:
		// sbxd failed before framing (a usage error) or was killed.
		return code, nil
	}
	return code, fmt.Errorf("sbxd exec --framed: %w", d.err)
}
