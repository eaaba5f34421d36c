package backend

import (
	"archive/tar"
	"bufio"
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
)

// The helpers in this file give every sandbox file access: they use the
// sandbox's FileSystem when it has one, then its Archiver, and otherwise run
// small POSIX sh scripts through Exec, which need only sh and coreutils (or
// busybox) in the sandbox.

// Exit codes the fallback scripts use to report file errors; chosen outside
// the range of sh's own codes (1, 2, 126, 127) and signals. Backends whose
// own file scripts use them get the same errors from ScriptError.
const (
	exitNotExist = 102
	exitIsDir    = 103
	exitNoAccess = 104
	exitNotDir   = 105
)

// ScriptError is the *fs.PathError of a file script that failed: exit codes
// 102 (fs.ErrNotExist), 103 (EISDIR), 104 (fs.ErrPermission) and 105
// (ENOTDIR), else the exit code with the script's stderr.
func ScriptError(op, name string, res ExecResult) error {
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
func ReadFile(ctx context.Context, sb Sandbox, name string) (io.ReadCloser, error) {
	if f, ok := As[FileSystem](sb); ok {
		rc, err := f.ReadFile(ctx, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return rc, err
		}
	}
	if a, ok := As[Archiver](sb); ok {
		rc, err := readFromArchive(ctx, a, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return rc, err
		}
	}
	return readByExec(ctx, sb, name)
}

func readFromArchive(ctx context.Context, a Archiver, name string) (io.ReadCloser, error) {
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

// readScript prints a marker line once the checks pass, so errors are known
// before the caller reads any content.
const readScript = `[ -e "$1" ] || exit 102
[ -d "$1" ] && exit 103
[ -r "$1" ] || exit 104
echo ok
exec cat -- "$1"`

func readByExec(ctx context.Context, sb Sandbox, name string) (io.ReadCloser, error) {
	return ScriptOutput(ctx, sb, "read", name, []string{"sh", "-c", readScript, "sh", name}, ScriptError)
}

// ScriptOutput runs argv in sb, a command that makes its checks, prints
// the line "ok" and then writes its data to stdout, and returns that data
// as a stream once the marker arrived. So a failed check is known before
// any data is read: it is ScriptOutput's error, failed(op, name, result)
// for a non-zero exit (as it is the stream's, should the command fail
// later). Closing the stream early kills the command.
func ScriptOutput(ctx context.Context, sb Sandbox, op, name string, argv []string, failed func(op, name string, res ExecResult) error) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	var res ExecResult
	var execErr error
	go func() {
		defer close(done)
		res, execErr = sb.Exec(ctx, ExecRequest{Cmd: argv, Stdout: pw})
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
func WriteFile(ctx context.Context, sb Sandbox, name string, r io.Reader, perm fs.FileMode) error {
	if f, ok := As[FileSystem](sb); ok {
		err := f.WriteFile(ctx, name, r, perm)
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	if a, ok := As[Archiver](sb); ok {
		err := writeByArchive(ctx, sb, a, name, r, perm)
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	return writeByExec(ctx, sb, name, r, perm)
}

func writeByArchive(ctx context.Context, sb Sandbox, a Archiver, name string, r io.Reader, perm fs.FileMode) error {
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
// path name (stored relative to "/", for Archiver.PutArchive at "/"), with
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

func absPath(ctx context.Context, sb Sandbox, name string) (string, error) {
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

func writeByExec(ctx context.Context, sb Sandbox, name string, r io.Reader, perm fs.FileMode) error {
	res, err := sb.Exec(ctx, ExecRequest{
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
func Stat(ctx context.Context, sb Sandbox, name string) (fs.FileInfo, error) {
	if f, ok := As[FileSystem](sb); ok {
		fi, err := f.Stat(ctx, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return fi, err
		}
	}
	infos, err := statByExec(ctx, sb, "stat", name, `[ -e "$1" ] || exit 102
exec stat -L -c '%f %s %Y %n' -- "$1"`)
	if err != nil {
		return nil, err
	}
	if len(infos) != 1 {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: errors.New("unexpected stat output")}
	}
	return infos[0], nil
}

// ReadDir lists a directory in sb, sorted by name, without following
// symlinks.
func ReadDir(ctx context.Context, sb Sandbox, name string) ([]fs.FileInfo, error) {
	if f, ok := As[FileSystem](sb); ok {
		fis, err := f.ReadDir(ctx, name)
		if !errors.Is(err, errors.ErrUnsupported) {
			return fis, err
		}
	}
	infos, err := statByExec(ctx, sb, "readdir", name, `[ -e "$1" ] || exit 102
[ -d "$1" ] || exit 105
[ -r "$1" ] && [ -x "$1" ] || exit 104
exec find "$1" -mindepth 1 -maxdepth 1 -exec stat -c '%f %s %Y %n' {} +`)
	if err != nil {
		return nil, err
	}
	SortByName(infos)
	return infos, nil
}

// SortByName sorts file infos by name.
func SortByName(infos []fs.FileInfo) {
	slices.SortFunc(infos, func(a, b fs.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
}

func statByExec(ctx context.Context, sb Sandbox, op, name, script string) ([]fs.FileInfo, error) {
	return StatLines(ctx, sb, op, name, []string{"sh", "-c", script, "sh", name}, ScriptError)
}

// StatLines runs argv in sb and parses each line of its output with
// ParseStatLine; a non-zero exit becomes failed(op, name, result).
func StatLines(ctx context.Context, sb Sandbox, op, name string, argv []string, failed func(op, name string, res ExecResult) error) ([]fs.FileInfo, error) {
	res, err := sb.Exec(ctx, ExecRequest{Cmd: argv, OutputLimit: -1})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, failed(op, name, res)
	}
	var infos []fs.FileInfo
	for line := range strings.SplitSeq(strings.TrimSuffix(string(res.Stdout), "\n"), "\n") {
		if line == "" {
			continue
		}
		fi, err := ParseStatLine(line)
		if err != nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		infos = append(infos, fi)
	}
	return infos, nil
}

// ParseStatLine reads a line of stat -c '%f %s %Y %n' (raw mode in hex,
// size, mtime in seconds, name; the name may be left out).
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
	name := ""
	if len(parts) == 4 {
		name = path.Base(parts[3])
	}
	return NewFileInfo(name, size, ModeFromUnix(uint32(raw)), time.Unix(mtime, 0)), nil
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

// NewFileInfo returns an fs.FileInfo with the given fields, for backends
// that learn about files from a wire format rather than a local stat.
func NewFileInfo(name string, size int64, mode fs.FileMode, modTime time.Time) fs.FileInfo {
	return fileInfo{name: name, size: size, mode: mode, modTime: modTime}
}

type fileInfo struct {
	name    string
	size    int64
	mode    fs.FileMode
	modTime time.Time
}

func (f fileInfo) Name() string       { return f.name }
func (f fileInfo) Size() int64        { return f.size }
func (f fileInfo) Mode() fs.FileMode  { return f.mode }
func (f fileInfo) ModTime() time.Time { return f.modTime }
func (f fileInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fileInfo) Sys() any           { return nil }
