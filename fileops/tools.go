package fileops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/hostfs"
)

// DefaultExecuteTimeout is Execute's timeout when neither the call nor
// Options set one.
const DefaultExecuteTimeout = 1800 * time.Second

// Limits on what the tools read and print. They keep one tool call from
// flooding an agent's context or the host's memory; every cut is announced in
// the output.
const (
	// DefaultReadLimit is how many lines ReadFile prints when limit is 0.
	DefaultReadLimit = 2000
	// MaxLineLength is the longest line, in characters, ReadFile prints in
	// one piece; longer lines are split into numbered pieces.
	MaxLineLength = 5000
	// MaxReadOutput caps the bytes of ReadFile's answer, line numbers
	// and notes included; a cut is announced with the offset to read on
	// from.
	MaxReadOutput = 1 << 20
	// MaxResults caps the lines Ls, Glob and Grep print.
	MaxResults = 1000
	// MaxGrepFileSize: Grep skips larger files (and says how many it
	// skipped).
	MaxGrepFileSize = 10 << 20
	// MaxGrepLineLength caps the characters of one line Grep prints in
	// content mode.
	MaxGrepLineLength = 1000
	// MaxEditFileSize: EditFile refuses larger files.
	MaxEditFileSize = 32 << 20
)

// Options configures Tools. The zero value is ready to use.
type Options struct {
	// ExecuteTimeout is Execute's timeout when the call passes 0.
	// Zero means DefaultExecuteTimeout.
	ExecuteTimeout time.Duration
	// OutputLimit caps the bytes of output Execute keeps (the first and
	// last halves; the middle is dropped and marked). Zero means
	// backend.DefaultOutputLimit; negative means no cap.
	OutputLimit int64
}

// Tools are the agent tools over one sandbox. They are safe for concurrent
// use.
type Tools struct {
	sb   backend.Sandbox
	opts Options

	mu      sync.Mutex
	workDir string // cached Info.WorkDir
}

// New returns the tools for sb.
func New(sb backend.Sandbox, opts Options) *Tools {
	if opts.ExecuteTimeout <= 0 {
		opts.ExecuteTimeout = DefaultExecuteTimeout
	}
	if opts.OutputLimit == 0 {
		opts.OutputLimit = backend.DefaultOutputLimit
	}
	return &Tools{sb: sb, opts: opts}
}

// ToolError is a problem the agent can act on: a missing file, an
// old_string that is not unique, a bad argument. Error returns exactly the
// text the agent should see ("Error: ..."). Unwrap returns the cause where
// there is one, so errors.Is(err, fs.ErrNotExist) and friends work.
//
// Errors of any other type (a backend that cannot be reached, a cancelled
// context) are infrastructure failures, returned as the backend reported
// them.
type ToolError struct {
	// Text is the agent-visible message.
	Text string
	// Err is the underlying cause, or nil.
	Err error
}

func (e *ToolError) Error() string { return e.Text }
func (e *ToolError) Unwrap() error { return e.Err }

func toolErr(cause error, format string, args ...any) *ToolError {
	return &ToolError{Text: fmt.Sprintf(format, args...), Err: cause}
}

// abs resolves p against the sandbox's working directory, as the backend
// does for relative paths, so tools can print absolute paths.
func (t *Tools) abs(ctx context.Context, p string) (string, error) {
	if path.IsAbs(p) {
		return path.Clean(p), nil
	}
	t.mu.Lock()
	wd := t.workDir
	t.mu.Unlock()
	if wd == "" {
		info, err := t.sb.Info(ctx)
		if err != nil {
			return "", err
		}
		wd = info.WorkDir
		if wd == "" {
			wd = "/"
		}
		t.mu.Lock()
		t.workDir = wd
		t.mu.Unlock()
	}
	return path.Join(wd, p), nil
}

// errKind classifies a file error from any backend.
type errKind int

const (
	kindOther errKind = iota
	kindNotExist
	kindPermission
	kindIsDir
	kindNotDir
	kindNotRegular
	kindLoop
)

func classify(err error) errKind {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return kindNotExist
	case errors.Is(err, fs.ErrPermission):
		return kindPermission
	case errors.Is(err, syscall.EISDIR):
		return kindIsDir
	case errors.Is(err, syscall.ENOTDIR):
		return kindNotDir
	case errors.Is(err, backend.ErrNotRegular):
		return kindNotRegular
	case errors.Is(err, syscall.ELOOP):
		return kindLoop
	}
	return kindOther
}

// classifyPath is classify, refined with a Stat when the error is a file
// error of a kind the backend did not spell with a standard errno.
func (t *Tools) classifyPath(ctx context.Context, p string, err error) errKind {
	k := classify(err)
	if k != kindOther {
		return k
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return kindOther
	}
	fi, serr := sbfiles.Stat(ctx, t.sb, p)
	switch {
	case serr != nil:
		return classify(serr)
	case fi.IsDir():
		return kindIsDir
	}
	return kindOther
}

// fileError turns an error about the file p (which the agent asked to read
// or edit) into the agent's message, or returns it unchanged when it is not
// about the file.
func (t *Tools) fileError(ctx context.Context, p string, err error) error {
	switch t.classifyPath(ctx, p, err) {
	case kindNotExist, kindNotDir:
		return toolErr(err, "Error: File not found: '%s'", p)
	case kindPermission:
		return toolErr(err, "Error: Permission denied: '%s'", p)
	case kindIsDir:
		return toolErr(err, "Error: '%s' is a directory, not a file. Use ls to list it.", p)
	case kindNotRegular:
		kind := "special file"
		if fi, serr := sbfiles.Stat(ctx, t.sb, p); serr == nil {
			kind = hostfs.Kind(fi.Mode())
		}
		return notRegular(err, p, kind)
	case kindLoop:
		return loopError(err, p)
	}
	return err
}

// notRegular is the answer for a path that is not a regular file (kind
// names what it is): reading a named pipe or a device could block or
// never end.
func notRegular(cause error, p, kind string) error {
	return toolErr(cause, "Error: '%s' is a %s, not a regular file; the file tools read regular files only.", p, kind)
}

func loopError(cause error, p string) error {
	return toolErr(cause, "Error: '%s': too many levels of symbolic links (a symlink loop).", p)
}

// dirError is fileError for a directory the agent asked to list or search.
func (t *Tools) dirError(ctx context.Context, p string, err error) error {
	switch t.classifyPath(ctx, p, err) {
	case kindNotExist:
		return toolErr(err, "Error: Path not found: '%s'", p)
	case kindPermission:
		return toolErr(err, "Error: Permission denied: '%s'", p)
	case kindNotDir:
		return toolErr(err, "Error: '%s' is not a directory. Use read_file to read a file.", p)
	case kindLoop:
		return loopError(err, p)
	}
	return err
}

// plural returns "1 line", "2 lines".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
