package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// File access over exec streams, as kubectl cp does it: each call is one
// exec of a small sh script in the pod, with the file's (or a tar
// stream's) bytes on the exec's stdin or stdout. The pod needs sh and
// coreutils (or busybox); tar for the Archiver.
//
// Every script checks first, then prints a marker line ("ok") before it
// touches the data stream: errors are known before any byte is read from
// the caller's reader or handed to the caller, so a refused write leaves
// the reader where it was (callers may fall back to another path) and a
// failed read returns its error from ReadFile itself.

var (
	_ backend.FileSystem = (*Sandbox)(nil)
	_ backend.Archiver   = (*Sandbox)(nil)
)

// Exit codes of the scripts: those of package backend's fallback scripts
// (102 not found, 103 a directory, 104 no access, 105 not a directory, 107
// not a regular file, 108 a symlink loop; see sbfiles.ScriptError), and
// one for a missing tool.
const exitNoTool = 106

// missingFn is a sh function for a path $1 that does not exist: it exits
// with ELOOP's code when $1 is a symlink loop (sbfiles.GoneFn), with
// ENOTDIR's when the nearest existing ancestor of $1 is not a directory,
// else with ErrNotExist's.
const missingFn = sbfiles.GoneFn + `missing() { [ -L "$1" ] && gone "$1"; p=$(dirname -- "$1"); while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done; [ -d "$p" ] && exit 102; exit 105; }
`

const (
	readScript = missingFn + `[ -e "$1" ] || missing "$1"
[ -d "$1" ] && exit 103
[ -f "$1" ] || exit 107
[ -r "$1" ] || exit 104
echo ok
exec cat -- "$1"`

	// writeScript follows a symlink at $1 (cat > writes its target), makes
	// missing parents, and reports a parent that is a file as ENOTDIR.
	writeScript = `[ -d "$1" ] && exit 103
d=$(dirname -- "$1")
if [ ! -d "$d" ]; then
  [ -e "$d" ] && exit 105
  if ! mkdir -p -- "$d" 2>/dev/null; then
    p=$d; while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done
    [ -d "$p" ] && exit 104
    exit 105
  fi
fi
[ -e "$1" ] && [ ! -w "$1" ] && exit 104
echo ok
{ cat > "$1"; } 2>/dev/null || exit 104
chmod "$2" "$1"`

	statScript = missingFn + `[ -e "$1" ] || missing "$1"
exec stat -L -c '%f %s %Y' -- "$1"`

	readDirScript = missingFn + `[ -e "$1" ] || missing "$1"
[ -d "$1" ] || exit 105
[ -r "$1" ] && [ -x "$1" ] || exit 104
nl='
'
cd -- "$1" && for f in .* *; do
  case $f in .|..) continue;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  case $f in
  *"$nl"*) s=$(stat -c '%f %s %Y' -- "$f") && printf '\000%s %s\000' "$s" "$f" ;;
  *) stat -c '%f %s %Y %n' -- "$f" ;;
  esac
done`

	// putScript extracts stdin into $1, owned by the extracting user (as
	// docker cp does by default), with the archive's modes.
	putScript = missingFn + `[ -e "$1" ] || missing "$1"
[ -d "$1" ] || exit 105
command -v tar >/dev/null 2>&1 || exit 106
echo ok
exec tar -x -o -f - -C "$1"`

	// getScript writes a tar stream of $1 named by its base name.
	getScript = missingFn + `[ -e "$1" ] || [ -L "$1" ] || missing "$1"
command -v tar >/dev/null 2>&1 || exit 106
d=$(dirname -- "$1"); b=$(basename -- "$1")
case $b in /) b=. ;; -*) b=./$b ;; esac
echo ok
exec tar -c -f - -C "$d" "$b"`
)

// fileErr turns a script's failure into a *fs.PathError with the errors the
// FileSystem contract names (package backend's codes, and 106: no tar).
func fileErr(op, name string, res backend.ExecResult) error {
	var err error
	switch res.ExitCode {
	case exitNoTool:
		err = fmt.Errorf("%w: the image has no tar (the k8s backend moves archives with tar over exec)", errors.ErrUnsupported)
	case 126, 127:
		err = fmt.Errorf("%w: file access over exec needs sh and coreutils (or busybox) in the image (exit code %d: %s)",
			errors.ErrUnsupported, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	default:
		return sbfiles.ScriptError(op, name, res)
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// errOldSbxd: the pod's sbxd predates the file command asked for.
var errOldSbxd = errors.New("the pod's sbxd is too old for this file command")

// sbxdFileErr is fileErr for an sbxd file command, which reports a command
// it does not know with a usage error (exit code 125).
func sbxdFileErr(op, name string, res backend.ExecResult) error {
	if res.ExitCode == 125 && strings.HasPrefix(string(res.Stderr), "usage:") {
		return &fs.PathError{Op: op, Path: name, Err: errOldSbxd}
	}
	return fileErr(op, name, res)
}

// script is the argv running one of the scripts above on args.
func script(body string, args ...string) []string {
	return append([]string{"/bin/sh", "-c", body, "sh"}, args...)
}

// ReadFile streams a file out of the pod (cat over exec).
func (s *Sandbox) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	return s.streamOut(ctx, "read", name, script(readScript, s.resolve(name)))
}

// WriteFile streams r into name in the pod (cat over exec), following a
// symlink at name and making missing parents.
func (s *Sandbox) WriteFile(ctx context.Context, name string, r io.Reader, perm fs.FileMode) error {
	return s.streamIn(ctx, "write", name, script(writeScript, s.resolve(name), strconv.FormatUint(uint64(perm.Perm()), 8)), r)
}

// Stat describes name, following symlinks.
func (s *Sandbox) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	infos, err := sbfiles.StatLines(ctx, s, "stat", name, script(statScript, s.resolve(name)), fileErr)
	if err != nil {
		return nil, err
	}
	if len(infos) != 1 {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fmt.Errorf("unexpected stat output (%d lines)", len(infos))}
	}
	i := infos[0]
	return backend.NewFileInfo(path.Base(s.resolve(name)), i.Size(), i.Mode(), i.ModTime()), nil
}

// ReadDir lists a directory without following symlinks, sorted by name
// (with sbxd ls when the pod has sbxd, else sh and stat).
func (s *Sandbox) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	var infos []fs.FileInfo
	err := errOldSbxd
	if s.sbxd {
		// Names holding a newline are framed (see sbfiles.StatRecords);
		// an sbxd from before that refuses -0 with a usage error.
		infos, err = sbfiles.StatLines(ctx, s, "readdir", name, []string{sbxdPath, "ls", "-0", s.resolve(name)}, sbxdFileErr)
	}
	if errors.Is(err, errOldSbxd) {
		infos, err = sbfiles.StatLines(ctx, s, "readdir", name, script(readDirScript, s.resolve(name)), fileErr)
	}
	if err != nil {
		return nil, err
	}
	sbfiles.SortByName(infos)
	return infos, nil
}

// PutArchive extracts a tar stream into dir (tar -x over exec).
func (s *Sandbox) PutArchive(ctx context.Context, dir string, tarStream io.Reader) error {
	return s.streamIn(ctx, "put archive", dir, script(putScript, s.resolve(dir)), tarStream)
}

// GetArchive streams a tar of p out of the pod (tar -c over exec).
func (s *Sandbox) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	return s.streamOut(ctx, "get archive", p, script(getScript, s.resolve(p)))
}

// streamOut runs a script that prints "ok" and then the data, and returns
// the data as a stream once the marker arrived (or the script's error; see
// sbfiles.ScriptOutput). Closing the stream early kills the command in the
// pod.
func (s *Sandbox) streamOut(ctx context.Context, op, name string, argv []string) (io.ReadCloser, error) {
	rc, err := sbfiles.ScriptOutput(ctx, s, op, name, argv, fileErr)
	if err != nil {
		return nil, err
	}
	return drainOnClose{rc}, nil
}

// drainOnClose ends a stream gently. What little the command may still
// write (a tar stream's end padding) is read first, so the exec ends by
// itself rather than with a broken pipe; a command with more to say, or
// that says nothing for a second, is cut off.
type drainOnClose struct{ io.ReadCloser }

func (d drainOnClose) Close() error {
	t := time.AfterFunc(time.Second, func() { d.ReadCloser.Close() })
	io.CopyN(io.Discard, d.ReadCloser, 64<<10)
	t.Stop()
	return d.ReadCloser.Close()
}

// streamIn runs a script that checks, prints "ok", then reads its stdin:
// r is read only after the marker, so a refused call leaves r unread.
func (s *Sandbox) streamIn(ctx context.Context, op, name string, argv []string, r io.Reader) error {
	g := newStdinGate(r)
	res, err := s.Exec(ctx, backend.ExecRequest{Cmd: argv, Stdin: g, Stdout: g.marker()})
	g.abort()
	if err != nil {
		return err
	}
	// The command saw EOF where r failed: what it wrote is incomplete.
	if rerr := g.readErr(); rerr != nil {
		return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("reading the data to send: %w", rerr)}
	}
	if res.ExitCode != 0 {
		return fileErr(op, name, res)
	}
	return nil
}

// stdinGate is a command's stdin that passes r on only once the command
// printed its "ok" line on stdout.
type stdinGate struct {
	r       io.Reader
	mu      sync.Mutex
	seen    []byte
	open    chan struct{} // closed: pass r on
	stop    chan struct{} // closed: the command ended; EOF
	once    sync.Once
	stopped sync.Once
	err     error // r's error other than EOF, under mu
}

func (g *stdinGate) readErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func newStdinGate(r io.Reader) *stdinGate {
	return &stdinGate{r: r, open: make(chan struct{}), stop: make(chan struct{})}
}

func (g *stdinGate) Read(p []byte) (int, error) {
	select {
	case <-g.open:
	case <-g.stop:
		return 0, io.EOF
	}
	select {
	case <-g.stop:
		return 0, io.EOF
	default:
	}
	n, err := g.r.Read(p)
	if err != nil && err != io.EOF {
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
	}
	return n, err
}

// abort ends stdin for a command that is done.
func (g *stdinGate) abort() { g.stopped.Do(func() { close(g.stop) }) }

// marker is the command's stdout: it opens the gate at "ok\n" and drops
// the rest.
func (g *stdinGate) marker() io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.seen) < 3 {
			g.seen = append(g.seen, p[:min(len(p), 3-len(g.seen))]...)
			if string(g.seen) == "ok\n" {
				g.once.Do(func() { close(g.open) })
			}
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
