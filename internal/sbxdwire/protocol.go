package sbxdwire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/sandboxkit/sandboxkit/internal/errdefs"
)

// ProtocolVersion is the wire protocol both ends speak. A client talks only
// to an agent that reports the same number in its hello; anything else is a
// stale agent, which the client replaces. Bump it with every change to a
// route, a wire type or the meaning of a field.
//
// 2: error codes not_regular (a read of a named pipe, socket or device,
// refused at once) and loop (ELOOP); a write follows a dangling symlink.
// 3: terminals (RouteTerminal).
const ProtocolVersion = 3

// Version is the agent's version string, as `sbxd serve` reports it.
var Version = fmt.Sprintf("sbxd/%d", ProtocolVersion)

// EnvExecID is the marker every process of one command carries in its
// environment, so the agent can find and kill a whole tree, including
// children that left the process group. It is the same marker `sbxd exec`
// uses.
const EnvExecID = "SBX_EXEC_ID"

// Routes. Every request is HTTP/1.1 on a yamux stream of its own; bodies
// are JSON unless a route says otherwise.
const (
	RouteHello   = "/v1/hello"
	RouteExec    = "/v1/exec" // POST; header HdrExec; body: stdin; response: frames (see FrameSink), trailer HdrResult
	RouteKill    = "/v1/kill" // POST KillRequest
	RouteStat    = "/v1/stat" // GET ?path=&lstat=1
	RouteReadDir = "/v1/readdir"
	RouteFile    = "/v1/file" // GET ?path=&offset=&length=&line=&lines=; PUT ?path=&mode= body: bytes
	RouteMkdir   = "/v1/mkdir"
	RouteRemove  = "/v1/remove"
	RouteMove    = "/v1/move"
	RouteWalk    = "/v1/walk" // POST WalkRequest; response: NDJSON of WalkEntry, then WalkDone
	RouteGlob    = "/v1/glob"
	RouteGrep    = "/v1/grep" // POST GrepRequest; response: NDJSON of GrepMessage
	RouteEdit    = "/v1/edit"
	RoutePrepare = "/v1/prepare-write" // POST PrepareRequest: where a bulk write lands
	RouteJobs    = "/v1/jobs"
	// Terminals: POST starts one (header HdrTerminal; body: input;
	// response: frames of output, trailer HdrResult once it ends); GET
	// lists them; {id}/attach, {id}/resize, {id}/kill.
	RouteTerminal = "/v1/terminals"
)

// Headers and trailers.
const (
	// HdrExec carries the exec route's ExecRequest; HdrResult is the
	// trailer with its ExecResult.
	HdrExec   = "Sbx-Exec"
	HdrResult = "Sbx-Result"
	// HdrSize is the file route's answer's size in bytes, when the file
	// is regular and no line range was asked for.
	HdrSize = "Sbx-Size"
	// Job output routes report the cursor to read on from and how many
	// bytes were dropped before the cursor asked for.
	HdrNextCursor = "Sbx-Next-Cursor"
	HdrDropped    = "Sbx-Dropped"
	HdrJobState   = "Sbx-Job-State"
	// HdrTerminal carries a terminal route's TerminalRequest.
	HdrTerminal = "Sbx-Terminal"
)

// Hello is the agent's answer to the version handshake.
type Hello struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version"`
	PID      int    `json:"pid"`
	UID      int    `json:"uid"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	WorkDir  string `json:"workdir"`
	// Sandbox is the ID of the sandbox an agent started with its sandbox
	// serves (sbxd init --sandbox); empty for agents started by a client.
	Sandbox string `json:"sandbox,omitempty"`
}

// ExecRequest is one command on the wire.
type ExecRequest struct {
	// ID names the command for the kill route; the client chooses it.
	ID   string            `json:"id"`
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env,omitempty"`
	Dir  string            `json:"dir,omitempty"`
	User string            `json:"user,omitempty"`
	// Stdin: the request body is the command's stdin; otherwise it reads
	// /dev/null.
	Stdin     bool  `json:"stdin,omitempty"`
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// StdoutLimit and StderrLimit, when positive, are how many bytes of
	// each stream the agent sends; the rest is read and dropped, and the
	// result says it was truncated. Zero: everything.
	StdoutLimit int64 `json:"stdout_limit,omitempty"`
	StderrLimit int64 `json:"stderr_limit,omitempty"`
}

// MaxIDLen bounds client-chosen IDs (commands, jobs).
const MaxIDLen = 64

// ValidID reports whether id is a safe identifier: it names files and
// environment values.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// DecodeExecRequest parses and checks the HdrExec header.
func DecodeExecRequest(s string) (ExecRequest, error) {
	var r ExecRequest
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, fmt.Errorf("exec request: %w", err)
	}
	switch {
	case !ValidID(r.ID):
		return r, fmt.Errorf("exec request: bad id %q", r.ID)
	case len(r.Argv) == 0 || r.Argv[0] == "":
		return r, errors.New("exec request: empty argv")
	case r.TimeoutMS < 0 || r.StdoutLimit < 0 || r.StderrLimit < 0:
		return r, errors.New("exec request: negative timeout or limit")
	}
	for _, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return r, errors.New("exec request: NUL byte in argv")
		}
	}
	for k, v := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return r, fmt.Errorf("exec request: bad environment variable %q", k)
		}
	}
	return r, nil
}

// ExecResult is the HdrResult trailer.
type ExecResult struct {
	ExitCode  int    `json:"exit_code"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
}

// KillRequest kills the running command ID.
type KillRequest struct {
	ID string `json:"id"`
}

// FileInfo is an fs.FileInfo on the wire.
type FileInfo struct {
	Name  string      `json:"name"`
	Size  int64       `json:"size"`
	Mode  fs.FileMode `json:"mode"`
	MTime int64       `json:"mtime"` // Unix nanoseconds
}

// FileInfoOf is fi on the wire.
func FileInfoOf(fi fs.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), MTime: fi.ModTime().UnixNano()}
}

// MkdirRequest makes a directory (RouteMkdir).
type MkdirRequest struct {
	Path    string      `json:"path"`
	Mode    fs.FileMode `json:"mode"`
	Parents bool        `json:"parents"`
}

// RemoveRequest removes a file or a tree (RouteRemove).
type RemoveRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

// MoveRequest renames From to To (RouteMove).
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite"`
}

// WalkRequest lists the entries below Root (see sbxd's Client.WalkFiles).
type WalkRequest struct {
	Root     string   `json:"root"`
	MaxDepth int      `json:"max_depth,omitempty"`
	Skip     []string `json:"skip,omitempty"`
	// Dirs: report directories too.
	Dirs bool `json:"dirs,omitempty"`
}

// WalkEntry is one line of the walk and glob routes' NDJSON answers: an
// entry found.
type WalkEntry struct {
	Path string   `json:"path,omitempty"`
	Info FileInfo `json:"info"`
}

// WalkDone ends a walk or glob answer: Error is set when it failed part way.
type WalkDone struct {
	Done  bool   `json:"done"`
	Error string `json:"error,omitempty"`
}

// GlobRequest lists the files below Dir that match Pattern (RouteGlob).
type GlobRequest struct {
	Pattern string `json:"pattern"`
	Dir     string `json:"dir"`
}

// PrepareRequest asks where a write of Path lands (symlinks followed) and
// for a temporary name beside it; missing parents are made. The client
// then writes the temporary file by another path and moves it over the
// target, so a bulk write is atomic too.
type PrepareRequest struct {
	Path string `json:"path"`
}

// PrepareResult is the answer to a PrepareRequest.
type PrepareResult struct {
	Target string `json:"target"`
	Tmp    string `json:"tmp"`
}

// EditRequest replaces Old with New in the file Path (RouteEdit).
type EditRequest struct {
	Path       string `json:"path"`
	Old        string `json:"old"`
	New        string `json:"new"`
	ReplaceAll bool   `json:"replace_all"`
}

// EditResult is how many occurrences an edit replaced.
type EditResult struct {
	Replaced int `json:"replaced"`
}

// ErrorBody is every failed call's body: Code says what kind of failure it
// is, so the client can rebuild an error that errors.Is understands
// (Cause).
type ErrorBody struct {
	Code  string `json:"code"`
	Op    string `json:"op,omitempty"`
	Path  string `json:"path,omitempty"`
	Msg   string `json:"msg"`
	Count int    `json:"count,omitempty"` // edit: how often old occurs
}

// Error codes.
const (
	CodeNotExist   = "not_exist"
	CodeExist      = "exist"
	CodePermission = "permission"
	CodeIsDir      = "is_dir"
	CodeNotDir     = "not_dir"
	CodeNotEmpty   = "not_empty"
	CodeNotRegular = "not_regular" // a named pipe, socket or device where a file is read
	CodeLoop       = "loop"        // too many levels of symbolic links
	CodeInvalid    = "invalid"
	CodeUnsupport  = "unsupported"
	CodeNoMatch    = "no_match"   // edit: old string not found
	CodeNotUnique  = "not_unique" // edit: old string occurs more than once
	CodeOther      = "other"
)

var errnoCodes = []struct {
	errno syscall.Errno
	code  string
}{
	{syscall.ENOENT, CodeNotExist},
	{syscall.EEXIST, CodeExist},
	{syscall.EACCES, CodePermission},
	{syscall.EPERM, CodePermission},
	{syscall.EROFS, CodePermission},
	{syscall.EISDIR, CodeIsDir},
	{syscall.ENOTDIR, CodeNotDir},
	{syscall.ENOTEMPTY, CodeNotEmpty},
	{syscall.ELOOP, CodeLoop},
}

// CodeOf classifies err for the wire.
func CodeOf(err error) string {
	for _, e := range errnoCodes {
		if errors.Is(err, e.errno) {
			return e.code
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return CodeNotExist
	case errors.Is(err, fs.ErrExist):
		return CodeExist
	case errors.Is(err, fs.ErrPermission):
		return CodePermission
	case errors.Is(err, errdefs.ErrNotRegular):
		return CodeNotRegular
	case errors.Is(err, errors.ErrUnsupported):
		return CodeUnsupport
	case errors.Is(err, ErrInvalid):
		return CodeInvalid
	}
	return CodeOther
}

// ErrInvalid marks the agent's errors about a malformed request (code
// invalid).
var ErrInvalid = errors.New("invalid request")

// Cause turns a wire code back into the error an *fs.PathError wraps.
// errdefs' sentinels are package backend's (backend.ErrNotRegular,
// backend.ErrInvalidConfig), so errors.Is matches those.
func (e ErrorBody) Cause() error {
	switch e.Code {
	case CodeNotExist:
		return fs.ErrNotExist
	case CodeExist:
		return fs.ErrExist
	case CodePermission:
		return fs.ErrPermission
	case CodeIsDir:
		return syscall.EISDIR
	case CodeNotDir:
		return syscall.ENOTDIR
	case CodeNotEmpty:
		return syscall.ENOTEMPTY
	case CodeNotRegular:
		return errdefs.ErrNotRegular
	case CodeLoop:
		return syscall.ELOOP
	case CodeUnsupport:
		return fmt.Errorf("%w: %s", errors.ErrUnsupported, e.Msg)
	case CodeInvalid:
		return fmt.Errorf("%w: %s", errdefs.ErrInvalidConfig, e.Msg)
	case CodeNoMatch:
		return ErrEditNoMatch
	case CodeNotUnique:
		return &NotUniqueError{Count: e.Count}
	}
	return errors.New(e.Msg)
}

// ErrEditNoMatch: Edit's old string does not occur in the file.
var ErrEditNoMatch = errors.New("old string not found")

// NotUniqueError: Edit's old string occurs Count times and ReplaceAll was
// not set (the uniqueness rule).
type NotUniqueError struct{ Count int }

func (e *NotUniqueError) Error() string {
	return fmt.Sprintf("old string occurs %d times (replace all, or make it unique)", e.Count)
}
