package sbxd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/errdefs"
)

// ProtocolVersion is the wire protocol both ends speak. A client talks only
// to an agent that reports the same number in its hello; anything else is a
// stale agent, which the client replaces. Bump it with every change to a
// route, a wire type or the meaning of a field.
//
// 2: error codes not_regular (a read of a named pipe, socket or device,
// refused at once) and loop (ELOOP); a write follows a dangling symlink.
// 3: terminals (routeTerminal).
const ProtocolVersion = 3

// Version is the agent's version string, as `sbxd serve` reports it.
var Version = fmt.Sprintf("sbxd/%d", ProtocolVersion)

// staleProtocol, when set at link time (-ldflags -X), is the protocol
// number the agent claims instead of ProtocolVersion: the tests build a
// stale agent this way.
var staleProtocol string

func advertisedProtocol() int {
	if n, err := strconv.Atoi(staleProtocol); err == nil {
		return n
	}
	return ProtocolVersion
}

// EnvExecID is the marker every process of one command carries in its
// environment, so the agent can find and kill a whole tree, including
// children that left the process group. It is the same marker `sbxd exec`
// uses.
const EnvExecID = "SBX_EXEC_ID"

// Markers a backend may have given the agent itself; commands do not
// inherit them, so that killing the agent by its marker does not kill
// background jobs (the local backend uses SANDBOXKIT_EXEC_ID).
var agentMarkers = []string{EnvExecID, "SANDBOXKIT_EXEC_ID"}

// Routes. Every request is HTTP/1.1 on a yamux stream of its own; bodies
// are JSON unless a route says otherwise.
const (
	routeHello   = "/v1/hello"
	routeExec    = "/v1/exec" // POST; header hdrExec; body: stdin; response: stdcopy frames, trailer hdrResult
	routeKill    = "/v1/kill" // POST killRequest
	routeStat    = "/v1/stat" // GET ?path=&lstat=1
	routeReadDir = "/v1/readdir"
	routeFile    = "/v1/file" // GET ?path=&offset=&length=&line=&lines=; PUT ?path=&mode= body: bytes
	routeMkdir   = "/v1/mkdir"
	routeRemove  = "/v1/remove"
	routeMove    = "/v1/move"
	routeWalk    = "/v1/walk" // POST walkRequest; response: NDJSON of walkEntry
	routeGlob    = "/v1/glob"
	routeGrep    = "/v1/grep" // POST GrepRequest; response: NDJSON of GrepFile
	routeEdit    = "/v1/edit"
	routePrepare = "/v1/prepare-write" // POST prepareRequest: where a bulk write lands
	routeJobs    = "/v1/jobs"
	// Terminals: POST starts one (header hdrTerminal; body: input;
	// response: frames of output, trailer hdrResult once it ends); GET
	// lists them; {id}/attach, {id}/resize, {id}/kill.
	routeTerminal = "/v1/terminals"
)

// Headers and trailers of the exec route.
const (
	hdrExec   = "Sbx-Exec"
	hdrResult = "Sbx-Result"
	// Job output routes report the cursor to read on from and how many
	// bytes were dropped before the cursor asked for.
	hdrNextCursor = "Sbx-Next-Cursor"
	hdrDropped    = "Sbx-Dropped"
	hdrJobState   = "Sbx-Job-State"
)

// hello is the agent's answer to the version handshake.
type hello struct {
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

// execRequest is one command on the wire.
type execRequest struct {
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

// maxIDLen bounds client-chosen IDs (commands, jobs).
const maxIDLen = 64

// validID reports whether id is a safe identifier: it names files and
// environment values.
func validID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// decodeExecRequest parses and checks the hdrExec header.
func decodeExecRequest(s string) (execRequest, error) {
	var r execRequest
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, fmt.Errorf("exec request: %w", err)
	}
	switch {
	case !validID(r.ID):
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

// execResult is the hdrResult trailer.
type execResult struct {
	ExitCode  int    `json:"exit_code"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
}

type killRequest struct {
	ID string `json:"id"`
}

// fileInfo is an fs.FileInfo on the wire.
type fileInfo struct {
	Name  string      `json:"name"`
	Size  int64       `json:"size"`
	Mode  fs.FileMode `json:"mode"`
	MTime int64       `json:"mtime"` // Unix nanoseconds
}

func toWire(fi fs.FileInfo) fileInfo {
	return fileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), MTime: fi.ModTime().UnixNano()}
}

func (f fileInfo) info() fs.FileInfo {
	return backend.NewFileInfo(f.Name, f.Size, f.Mode, time.Unix(0, f.MTime))
}

type mkdirRequest struct {
	Path    string      `json:"path"`
	Mode    fs.FileMode `json:"mode"`
	Parents bool        `json:"parents"`
}

type removeRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

type moveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite"`
}

// walkRequest lists the entries below Root (see Client.WalkFiles).
type walkRequest struct {
	Root     string   `json:"root"`
	MaxDepth int      `json:"max_depth,omitempty"`
	Skip     []string `json:"skip,omitempty"`
	// Dirs: report directories too.
	Dirs bool `json:"dirs,omitempty"`
}

// walkEntry is one line of the walk route's NDJSON answer: an entry, or a
// final line with Error set when the walk failed part way.
type walkEntry struct {
	Path string   `json:"path,omitempty"`
	Info fileInfo `json:"info"`
}

type globRequest struct {
	Pattern string `json:"pattern"`
	Dir     string `json:"dir"`
}

// prepareRequest asks where a write of Path lands (symlinks followed) and
// for a temporary name beside it; missing parents are made. The client
// then writes the temporary file by another path and moves it over the
// target, so a bulk write is atomic too.
type prepareRequest struct {
	Path string `json:"path"`
}

type prepareResult struct {
	Target string `json:"target"`
	Tmp    string `json:"tmp"`
}

type editRequest struct {
	Path       string `json:"path"`
	Old        string `json:"old"`
	New        string `json:"new"`
	ReplaceAll bool   `json:"replace_all"`
}

type editResult struct {
	Replaced int `json:"replaced"`
}

// wireError is every failed call's body: Code says what kind of failure it
// is, so the client can rebuild an error that errors.Is understands.
type wireError struct {
	Code  string `json:"code"`
	Op    string `json:"op,omitempty"`
	Path  string `json:"path,omitempty"`
	Msg   string `json:"msg"`
	Count int    `json:"count,omitempty"` // edit: how often old occurs
}

// Error codes.
const (
	codeNotExist   = "not_exist"
	codeExist      = "exist"
	codePermission = "permission"
	codeIsDir      = "is_dir"
	codeNotDir     = "not_dir"
	codeNotEmpty   = "not_empty"
	codeNotRegular = "not_regular" // a named pipe, socket or device where a file is read
	codeLoop       = "loop"        // too many levels of symbolic links
	codeInvalid    = "invalid"
	codeUnsupport  = "unsupported"
	codeNoMatch    = "no_match"   // edit: old string not found
	codeNotUnique  = "not_unique" // edit: old string occurs more than once
	codeOther      = "other"
)

var errnoCodes = []struct {
	errno syscall.Errno
	code  string
}{
	{syscall.ENOENT, codeNotExist},
	{syscall.EEXIST, codeExist},
	{syscall.EACCES, codePermission},
	{syscall.EPERM, codePermission},
	{syscall.EROFS, codePermission},
	{syscall.EISDIR, codeIsDir},
	{syscall.ENOTDIR, codeNotDir},
	{syscall.ENOTEMPTY, codeNotEmpty},
	{syscall.ELOOP, codeLoop},
}

// codeOf classifies err for the wire.
func codeOf(err error) string {
	for _, e := range errnoCodes {
		if errors.Is(err, e.errno) {
			return e.code
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return codeNotExist
	case errors.Is(err, fs.ErrExist):
		return codeExist
	case errors.Is(err, fs.ErrPermission):
		return codePermission
	case errors.Is(err, errdefs.ErrNotRegular):
		return codeNotRegular
	case errors.Is(err, errors.ErrUnsupported):
		return codeUnsupport
	case errors.Is(err, errInvalid):
		return codeInvalid
	}
	return codeOther
}

var errInvalid = errors.New("invalid request")

// cause turns a wire code back into the error an *fs.PathError wraps.
func (e wireError) cause() error {
	switch e.Code {
	case codeNotExist:
		return fs.ErrNotExist
	case codeExist:
		return fs.ErrExist
	case codePermission:
		return fs.ErrPermission
	case codeIsDir:
		return syscall.EISDIR
	case codeNotDir:
		return syscall.ENOTDIR
	case codeNotEmpty:
		return syscall.ENOTEMPTY
	case codeNotRegular:
		return backend.ErrNotRegular
	case codeLoop:
		return syscall.ELOOP
	case codeUnsupport:
		return fmt.Errorf("%w: %s", errors.ErrUnsupported, e.Msg)
	case codeInvalid:
		return fmt.Errorf("%w: %s", backend.ErrInvalidConfig, e.Msg)
	case codeNoMatch:
		return ErrEditNoMatch
	case codeNotUnique:
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
