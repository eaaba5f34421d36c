// Package sbfiles gives file access to any sandbox: ReadFile, WriteFile,
// Stat, ReadDir and Readlink use the sandbox's [backend.FileSystem] (or
// [backend.Readlinker]) when it has one, then its [backend.Archiver], and
// otherwise run small POSIX sh scripts through Exec, which need only sh and
// coreutils (or busybox) in the sandbox. Backend authors use its script
// pieces (GoneFn, StatBatchScript, StatRecords, StatLines, ScriptOutput,
// ScriptError) for file operations of their own, so that every backend
// reports the same errors for the same failures.
package sbfiles

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Exit codes the fallback scripts use to report file errors; chosen outside
// the range of sh's own codes (1, 2, 126, 127) and signals. Backends whose
// own file scripts use them get the same errors from ScriptError.
// (106 is k8s's and fileops's "a tool is missing".)
const (
	exitNotExist   = 102
	exitIsDir      = 103
	exitNoAccess   = 104
	exitNotDir     = 105
	exitNotRegular = 107
	exitLoop       = 108
	exitNotLink    = 109
)

// ScriptError is the *fs.PathError of a file script that failed: exit codes
// 102 (fs.ErrNotExist), 103 (EISDIR), 104 (fs.ErrPermission), 105
// (ENOTDIR), 107 (backend.ErrNotRegular), 108 (ELOOP: too many levels of symbolic
// links) and 109 (EINVAL: not a symbolic link, from Readlink), else the
// exit code with the script's stderr.
func ScriptError(op, name string, res backend.ExecResult) error {
	var err error
	switch res.ExitCode {
	case exitNotExist:
		err = fs.ErrNotExist
	case exitIsDir:
		err = syscall.EISDIR
	case exitNoAccess:
		err = fs.ErrPermission
	case exitNotDir:
		err = syscall.ENOTDIR
	case exitNotRegular:
		err = backend.ErrNotRegular
	case exitLoop:
		err = syscall.ELOOP
	case exitNotLink:
		err = syscall.EINVAL
	default:
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = "no output"
		}
		err = fmt.Errorf("exit code %d: %s", res.ExitCode, msg)
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// ReadFile opens a file in sb for reading.
func ReadFile(ctx context.Context, sb backend.Sandbox, name string) (io.ReadCloser, error) {
	if f, ok := backend.As[backend.FileSystem](sb); ok {
		rc, err := f.ReadFile(ctx, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return rc, err
		}
	}
	if a, ok := backend.As[backend.Archiver](sb); ok {
		rc, err := readFromArchive(ctx, a, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return rc, err
		}
	}
	return readByExec(ctx, sb, name)
}

func readFromArchive(ctx context.Context, a backend.Archiver, name string) (io.ReadCloser, error) {
	stream, err := a.GetArchive(ctx, name)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(stream)
	hdr, err := tr.Next()
	if err != nil {
		stream.Close()
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("reading archive: %w", err)}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		stream.Close()
		return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	case tar.TypeReg:
		return readCloser{tr, stream}, nil
	}
	stream.Close()
	// A symlink: archives do not follow them, so read the target.
	if hdr.Typeflag == tar.TypeSymlink {
		target := hdr.Linkname
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(name), target)
		}
		return readFromArchive(ctx, a, target)
	}
	return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("not a regular file (tar type %q)", hdr.Typeflag)}
}

type readCloser struct {
	io.Reader
	io.Closer
}

// GoneFn defines a sh function gone for a path $1 that does not exist
// (test -e fails): it exits 108 (ELOOP) when $1 is a chain of more than
// 40 symbolic links (a loop), else 102 (not found; a dangling link too).
// File scripts use it as `[ -e "$1" ] || gone "$1"`.
const GoneFn = `gone() {
  p=$1 n=0
  while [ -L "$p" ]; do
    n=$((n+1))
    [ $n -gt 40 ] && exit 108
    t=$(readlink -- "$p") || exit 102
    case $t in
    /*) p=$t ;;
    *) case $p in */*) p=${p%/*}/$t ;; *) p=$t ;; esac ;;
    esac
  done
  exit 102
}
`

// readScript prints a marker line once the checks pass, so errors are known
// before the caller reads any content. Only regular files are read: a
// named pipe would block cat until a writer came.
const readScript = GoneFn + `[ -e "$1" ] || gone "$1"
[ -d "$1" ] && exit 103
[ -f "$1" ] || exit 107
[ -r "$1" ] || exit 104
echo ok
exec cat -- "$1"`

func readByExec(ctx context.Context, sb backend.Sandbox, name string) (io.ReadCloser, error) {
	return ScriptOutput(ctx, sb, "read", name, []string{"sh", "-c", readScript, "sh", name}, ScriptError)
}

// ScriptOutput runs argv in sb, a command that makes its checks, prints
// the line "ok" and then writes its data to stdout, and returns that data
// as a stream once the marker arrived. So a failed check is known before
// any data is read: it is ScriptOutput's error, failed(op, name, result)
// for a non-zero exit (as it is the stream's, should the command fail
// later). Closing the stream early kills the command.
func ScriptOutput(ctx context.Context, sb backend.Sandbox, op, name string, argv []string, failed func(op, name string, res backend.ExecResult) error) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	var res backend.ExecResult
	var execErr error
	go func() {
		defer close(done)
		res, execErr = sb.Exec(ctx, backend.ExecRequest{Cmd: argv, Stdout: pw})
		switch {
		case execErr != nil:
			pw.CloseWithError(execErr)
		case res.ExitCode != 0:
			pw.CloseWithError(failed(op, name, res))
		default:
			pw.Close()
		}
	}()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	if err != nil || line != "ok\n" {
		cancel()
		pr.CloseWithError(io.ErrClosedPipe)
		<-done
		if execErr != nil {
			return nil, execErr
		}
		if res.ExitCode != 0 {
			return nil, failed(op, name, res)
		}
		return nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("unexpected reply %q", line)}
	}
	return &execReader{Reader: br, pr: pr, cancel: cancel, done: done}, nil
}

type execReader struct {
	io.Reader
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
}

// Close ends the stream, killing the command if it is still running. It
// may be called more than once, also while a Read is under way.
func (r *execReader) Close() error {
	r.pr.CloseWithError(io.ErrClosedPipe)
	r.cancel()
	<-r.done
	return nil
}

// WriteFile creates or replaces a file in sb with r's bytes, creating
// missing parent directories.
func WriteFile(ctx context.Context, sb backend.Sandbox, name string, r io.Reader, perm fs.FileMode) error {
	if f, ok := backend.As[backend.FileSystem](sb); ok {
		err := f.WriteFile(ctx, name, r, perm)
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	if a, ok := backend.As[backend.Archiver](sb); ok {
		err := writeByArchive(ctx, sb, a, name, r, perm)
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	return writeByExec(ctx, sb, name, r, perm)
}

func writeByArchive(ctx context.Context, sb backend.Sandbox, a backend.Archiver, name string, r io.Reader, perm fs.FileMode) error {
	abs, err := absPath(ctx, sb, name)
	if err != nil {
		return err
	}
	if fi, err := Stat(ctx, sb, abs); err == nil && fi.IsDir() {
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	}
	stream, err := FileTar(abs, r, perm)
	if err != nil {
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	defer stream.Close()
	return a.PutArchive(ctx, "/", stream)
}

// FileTar returns a tar stream holding one regular file at the absolute
// path name (stored relative to "/", for backend.Archiver.PutArchive at "/"), with
// r's bytes and mode perm. r is spooled to a temporary file when its length
// is not known up front; Close releases it.
func FileTar(name string, r io.Reader, perm fs.FileMode) (io.ReadCloser, error) {
	data, size, cleanup, err := sized(r)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg,
			Name:     strings.TrimPrefix(path.Clean(name), "/"),
			Mode:     int64(perm.Perm()),
			Size:     size,
			ModTime:  time.Now(),
		})
		if err == nil {
			_, err = io.Copy(tw, data)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return readCloser{pr, closerFunc(func() error {
		pr.CloseWithError(io.ErrClosedPipe)
		cleanup()
		return nil
	})}, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// sized returns r with its length, spooling it to a temporary file when the
// length is not known up front (tar headers need it).
func sized(r io.Reader) (io.Reader, int64, func(), error) {
	if l, ok := r.(interface{ Len() int }); ok {
		return r, int64(l.Len()), func() {}, nil
	}
	f, err := os.CreateTemp("", "sandboxkit-upload-*")
	if err != nil {
		return nil, 0, nil, err
	}
	cleanup := func() { f.Close(); os.Remove(f.Name()) }
	n, err := io.Copy(f, r)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		cleanup()
		return nil, 0, nil, err
	}
	return f, n, cleanup, nil
}

func absPath(ctx context.Context, sb backend.Sandbox, name string) (string, error) {
	if path.IsAbs(name) {
		return path.Clean(name), nil
	}
	info, err := sb.Info(ctx)
	if err != nil {
		return "", err
	}
	wd := info.WorkDir
	if wd == "" {
		wd = "/"
	}
	return path.Join(wd, name), nil
}

const writeScript = `[ -d "$1" ] && exit 103
d=$(dirname -- "$1")
if [ ! -d "$d" ]; then
  [ -e "$d" ] && exit 105
  mkdir -p -- "$d" 2>/dev/null || exit 104
fi
{ cat > "$1"; } 2>/dev/null || exit 104
chmod "$2" "$1"`

func writeByExec(ctx context.Context, sb backend.Sandbox, name string, r io.Reader, perm fs.FileMode) error {
	res, err := sb.Exec(ctx, backend.ExecRequest{
		Cmd:   []string{"sh", "-c", writeScript, "sh", name, strconv.FormatUint(uint64(perm.Perm()), 8)},
		Stdin: r,
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return ScriptError("write", name, res)
	}
	return nil
}

// Stat describes a file in sb, following symlinks.
func Stat(ctx context.Context, sb backend.Sandbox, name string) (fs.FileInfo, error) {
	if f, ok := backend.As[backend.FileSystem](sb); ok {
		fi, err := f.Stat(ctx, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return fi, err
		}
	}
	// No %n: the caller knows the name, and it might hold a newline.
	infos, err := statByExec(ctx, sb, "stat", name, GoneFn+`[ -e "$1" ] || gone "$1"
exec stat -L -c '%f %s %Y' -- "$1"`)
	if err != nil {
		return nil, err
	}
	if len(infos) != 1 {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: errors.New("unexpected stat output")}
	}
	i := infos[0]
	return backend.NewFileInfo(path.Base(name), i.Size(), i.Mode(), i.ModTime()), nil
}

// ReadDir lists a directory in sb, sorted by name, without following
// symlinks.
func ReadDir(ctx context.Context, sb backend.Sandbox, name string) ([]fs.FileInfo, error) {
	if f, ok := backend.As[backend.FileSystem](sb); ok {
		fis, err := f.ReadDir(ctx, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return fis, err
		}
	}
	infos, err := StatLines(ctx, sb, "readdir", name, []string{"sh", "-c", GoneFn + `[ -e "$1" ] || gone "$1"
[ -d "$1" ] || exit 105
[ -r "$1" ] && [ -x "$1" ] || exit 104
exec find "$1" -mindepth 1 -maxdepth 1 -exec sh -c "$2" sh '%f %s %Y' {} +`, "sh", name, StatBatchScript}, ScriptError)
	if err != nil {
		return nil, err
	}
	SortByName(infos)
	return infos, nil
}

// StatBatchScript is a sh script that prints one stat record (see
// StatRecords) for each path it is given after a stat -c format: sh -c
// StatBatchScript sh FORMAT PATH... prints "FORMAT PATH" (stat -c 'FORMAT
// %n') for each PATH, framed with NUL bytes when PATH holds a newline, so
// no file name can forge or split a record. It needs only POSIX sh and
// stat (coreutils or busybox), and runs stat once for all the ordinary
// paths (find ... -exec sh -c "$script" sh FORMAT {} +). A path removed
// between the listing that named it and the stat is left out, not an
// error (a busy /tmp lists files that are gone a moment later): when
// stat fails and one of the paths no longer exists, the script exits 0
// with the records of the others.
const StatBatchScript = `f=$1
shift
nl='
'
for p do
  shift
  case $p in
  *"$nl"*) s=$(stat -c "$f" -- "$p") && printf '\000%s %s\000' "$s" "$p" ;;
  *) set -- "$@" "$p" ;;
  esac
done
[ $# -eq 0 ] || stat -c "$f %n" -- "$@" || {
  for p do [ -e "$p" ] || [ -L "$p" ] || exit 0; done
  exit 1
}`

// SortByName sorts file infos by name.
func SortByName(infos []fs.FileInfo) {
	slices.SortFunc(infos, func(a, b fs.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
}

func statByExec(ctx context.Context, sb backend.Sandbox, op, name, script string) ([]fs.FileInfo, error) {
	return StatLines(ctx, sb, op, name, []string{"sh", "-c", script, "sh", name}, ScriptError)
}

// StatLines runs argv in sb and parses each record of its output (see
// StatRecords) with ParseStatLine; a non-zero exit becomes failed(op, name,
// result).
func StatLines(ctx context.Context, sb backend.Sandbox, op, name string, argv []string, failed func(op, name string, res backend.ExecResult) error) ([]fs.FileInfo, error) {
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: argv, OutputLimit: -1})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, failed(op, name, res)
	}
	records, complete := StatRecords(res.Stdout)
	if !complete {
		return nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("unexpected stat output: the last record is cut (%q)", res.Stdout[len(res.Stdout)-min(len(res.Stdout), 64):])}
	}
	var infos []fs.FileInfo
	for _, rec := range records {
		fi, err := ParseStatLine(rec)
		if err != nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		infos = append(infos, fi)
	}
	return infos, nil
}

// StatRecords splits the output of a file listing into its records. A
// record that starts with a NUL byte runs to the next NUL byte and may
// hold newlines; any other record runs to the next newline. File names
// cannot hold NUL bytes, so a listing that frames every name holding a
// newline with NULs (as StatBatchScript and `sbxd ls -0` do) cannot be
// misread, whatever the names are. Empty records are left out. complete
// is false when the output ends inside a record (cut by an output limit):
// that record is left out too.
func StatRecords(out []byte) (records []string, complete bool) {
	for len(out) > 0 {
		end, sep := byte('\n'), 0
		if out[0] == 0 {
			end, sep = 0, 1
		}
		i := bytes.IndexByte(out[sep:], end)
		if i < 0 {
			return records, false
		}
		if rec := out[sep : sep+i]; len(rec) > 0 {
			records = append(records, string(rec))
		}
		out = out[sep+i+1:]
	}
	return records, true
}

// ParseStatLine reads a record of stat -c '%f %s %Y %n' (raw mode in hex,
// size, mtime in seconds, name; the name may be left out). The name is
// everything after the third space, newlines and spaces included; its
// last path element is the FileInfo's name.
func ParseStatLine(line string) (fs.FileInfo, error) {
	parts := strings.SplitN(line, " ", 4)
	if len(parts) < 3 {
		return nil, fmt.Errorf("unexpected stat output %q", line)
	}
	raw, err1 := strconv.ParseUint(parts[0], 16, 32)
	size, err2 := strconv.ParseInt(parts[1], 10, 64)
	mtime, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("unexpected stat output %q: %w", line, err)
	}
	if size < 0 {
		return nil, fmt.Errorf("unexpected stat output %q: negative size", line)
	}
	name := ""
	if len(parts) == 4 {
		name = path.Base(parts[3])
	}
	return backend.NewFileInfo(name, size, ModeFromUnix(uint32(raw)), time.Unix(mtime, 0)), nil
}

// readlinkScript prints the target of the symlink $1 after a marker
// (readlink's own trailing newline is then cut, not a target's).
const readlinkScript = `[ -L "$1" ] || { [ -e "$1" ] && exit 109; exit 102; }
t=$(readlink -- "$1"; echo .) || exit 102
printf '%s' "${t%?.}"`

// Readlink returns the target of the symbolic link name in sb, as it is
// stored: with the sandbox's Readlinker when it has one, else with
// readlink(1) through Exec. The errors are Readlinker's.
func Readlink(ctx context.Context, sb backend.Sandbox, name string) (string, error) {
	if r, ok := backend.As[backend.Readlinker](sb); ok {
		t, err := r.Readlink(ctx, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return t, err
		}
	}
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", readlinkScript, "sh", name}, OutputLimit: -1})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", ScriptError("readlink", name, res)
	}
	return string(res.Stdout), nil
}

// ModeFromUnix converts a Unix st_mode to an fs.FileMode.
func ModeFromUnix(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		mode |= fs.ModeDir
	case syscall.S_IFLNK:
		mode |= fs.ModeSymlink
	case syscall.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		mode |= fs.ModeSocket
	case syscall.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&syscall.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
