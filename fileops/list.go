package fileops

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// fileEntry is a file found under a directory.
type fileEntry struct {
	path  string // absolute
	size  int64
	mtime int64 // Unix seconds
}

// listSpec says which files listFiles returns.
type listSpec struct {
	// regular: regular files only (grep); otherwise everything but
	// directories (glob).
	regular bool
	// depth: only files exactly this deep below the base (1: direct
	// children); 0: any depth.
	depth int
	// name: a find -name pattern every file's base name matches, or "".
	// It only narrows what is transferred; callers still match.
	name string
	// skipVCS: do not descend into .git, .hg and .svn directories.
	skipVCS bool
}

// prunedRoots are not walked when a walk starts at "/": they are kernel
// views, not files an agent means, and walking them is slow or endless.
var prunedRoots = []string{"/proc", "/sys", "/dev"}

var vcsDirs = []string{".git", ".hg", ".svn"}

// maxListOutput bounds the listing transferred from the sandbox.
const maxListOutput = 64 << 20

// Exit codes of listScript, backend's (see sbfiles.ScriptError).
const (
	exitNotExist = 102
	exitNoAccess = 104
	exitNotDir   = 105
	exitNoTools  = 106
	exitLoop     = 108
)

// listScript runs find in the sandbox and prints a record "size mtime
// path" for each file, framed as sbfiles.StatRecords reads it (a path
// holding a newline between NUL bytes). Errors inside the walk (an
// unreadable directory) do not fail it. The base comes as $1,
// sbfiles.StatBatchScript as $2, the find expression after them.
const listScript = sbfiles.GoneFn + `command -v find >/dev/null 2>&1 && command -v stat >/dev/null 2>&1 || exit 106
base=$1
batch=$2
shift 2
[ -e "$base" ] || gone "$base"
[ -d "$base" ] || exit 105
[ -r "$base" ] && [ -x "$base" ] || exit 104
find -H "$base" "$@" -exec sh -c "$batch" sh '%s %Y' {} + 2>/dev/null
exit 0`

// listFiles lists the files under the absolute directory base. truncated
// reports that the listing hit maxListOutput. Errors about base itself are
// *fs.PathError (fs.ErrNotExist, fs.ErrPermission, syscall.ENOTDIR).
func (t *Tools) listFiles(ctx context.Context, base string, spec listSpec) (files []fileEntry, truncated bool, err error) {
	if files, truncated, ok, err := t.walkNative(ctx, base, spec); ok {
		return files, truncated, err
	}
	argv := append([]string{"sh", "-c", listScript, "sh", base, sbfiles.StatBatchScript}, findArgs(base, spec)...)
	res, err := t.sb.Exec(ctx, backend.ExecRequest{Cmd: argv, OutputLimit: maxListOutput})
	if err != nil {
		return nil, false, err
	}
	switch res.ExitCode {
	case 0:
	case exitNotExist:
		return nil, false, &fs.PathError{Op: "list", Path: base, Err: fs.ErrNotExist}
	case exitNoAccess:
		return nil, false, &fs.PathError{Op: "list", Path: base, Err: fs.ErrPermission}
	case exitNotDir:
		return nil, false, &fs.PathError{Op: "list", Path: base, Err: syscall.ENOTDIR}
	case exitLoop:
		return nil, false, &fs.PathError{Op: "list", Path: base, Err: syscall.ELOOP}
	case exitNoTools, 126, 127:
		// No sh, find or stat in the sandbox: walk with native file
		// access if the backend has it.
		if _, ok := backend.As[backend.FileSystem](t.sb); ok {
			return t.walkFiles(ctx, base, spec)
		}
		return nil, false, fmt.Errorf("fileops: listing files under %s needs sh, find and stat in the sandbox (exit code %d)", base, res.ExitCode)
	default:
		return nil, false, fmt.Errorf("fileops: listing files under %s: exit code %d: %s", base, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	// A record the output limit cut is left out.
	records, _ := sbfiles.StatRecords(res.Stdout)
	for _, rec := range records {
		if e, ok := parseListLine(rec); ok {
			files = append(files, e)
		}
	}
	return files, res.Truncated, nil
}

// findArgs builds the find expression for spec.
func findArgs(base string, spec listSpec) []string {
	var args []string
	if spec.depth > 0 {
		d := strconv.Itoa(spec.depth)
		args = append(args, "-mindepth", d, "-maxdepth", d)
	}
	var prune []string
	if base == "/" {
		for _, r := range prunedRoots {
			prune = append(prune, "-path", r, "-o")
		}
	}
	if spec.skipVCS {
		prune = append(prune, "(", "-type", "d", "(")
		for i, d := range vcsDirs {
			if i > 0 {
				prune = append(prune, "-o")
			}
			prune = append(prune, "-name", d)
		}
		prune = append(prune, ")", ")", "-o")
	}
	if len(prune) > 0 {
		prune = prune[:len(prune)-1] // the last "-o"
		args = append(args, "(")
		args = append(args, prune...)
		args = append(args, ")", "-prune", "-o")
	}
	if spec.regular {
		args = append(args, "-type", "f")
	} else {
		args = append(args, "!", "-type", "d")
	}
	if spec.name != "" {
		args = append(args, "-name", spec.name)
	}
	return args
}

// parseListLine parses a record "size mtime path" (the path may hold
// spaces and newlines).
func parseListLine(line string) (fileEntry, bool) {
	size, rest, ok1 := strings.Cut(line, " ")
	mtime, p, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !path.IsAbs(p) {
		return fileEntry{}, false
	}
	s, err1 := strconv.ParseInt(size, 10, 64)
	m, err2 := strconv.ParseInt(mtime, 10, 64)
	if err1 != nil || err2 != nil {
		return fileEntry{}, false
	}
	return fileEntry{path: p, size: s, mtime: m}, true
}

// walkFiles is listFiles with one ReadDir per directory, for sandboxes with
// native file access but no find.
func (t *Tools) walkFiles(ctx context.Context, base string, spec listSpec) ([]fileEntry, bool, error) {
	fi, err := sbfiles.Stat(ctx, t.sb, base)
	if err != nil {
		return nil, false, err
	}
	if !fi.IsDir() {
		return nil, false, &fs.PathError{Op: "list", Path: base, Err: syscall.ENOTDIR}
	}
	var files []fileEntry
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		infos, err := sbfiles.ReadDir(ctx, t.sb, dir)
		if err != nil {
			if depth == 0 {
				return err
			}
			return nil // unreadable below the base: skip, as find does
		}
		for _, fi := range infos {
			p := path.Join(dir, fi.Name())
			if fi.IsDir() {
				if (base == "/" && slices.Contains(prunedRoots, p)) || (spec.skipVCS && slices.Contains(vcsDirs, fi.Name())) {
					continue
				}
				if spec.depth == 0 || depth+1 < spec.depth {
					if err := walk(p, depth+1); err != nil {
						return err
					}
				}
				continue
			}
			if spec.depth > 0 && depth+1 != spec.depth {
				continue
			}
			if spec.regular && !fi.Mode().IsRegular() {
				continue
			}
			if spec.name != "" {
				if ok, _ := path.Match(spec.name, fi.Name()); !ok {
					continue
				}
			}
			files = append(files, fileEntry{path: p, size: fi.Size(), mtime: fi.ModTime().Unix()})
		}
		return ctx.Err()
	}
	if err := walk(base, 0); err != nil {
		return nil, false, err
	}
	return files, false, nil
}

// relTo returns p relative to the directory base (p is under base).
func relTo(base, p string) string {
	if base == "/" {
		return strings.TrimPrefix(p, "/")
	}
	return strings.TrimPrefix(strings.TrimPrefix(p, base), "/")
}
