package sbxd

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// ServerOptions configures the agent side.
type ServerOptions struct {
	// StateDir holds background jobs (their output and status), so they
	// outlive one agent process and a restarted agent finds them. Empty:
	// $TMPDIR/sbxd-jobs.
	StateDir string
	// JobOutputLimit bounds the output a job keeps on disk (the most
	// recent bytes are kept). Zero: DefaultJobOutputLimit.
	JobOutputLimit int64
	// Logger receives the agent's own diagnostics (default: discard). The
	// agent's stderr goes to the client, which logs it.
	Logger *slog.Logger
	// Sandbox is the ID of the sandbox the agent serves, told in its hello
	// (see Client: a dialled agent must name the sandbox it was dialled for).
	Sandbox string
}

// DefaultJobOutputLimit is how many bytes of a background job's most recent
// output the agent keeps on disk.
const DefaultJobOutputLimit = 8 << 20

// Server is the agent: it answers requests that arrive over one stream
// (the stdin and stdout of `sbxd serve`). Commands it starts run in process
// groups of their own, marked with EnvExecID.
type Server struct {
	opts    ServerOptions
	log     *slog.Logger
	baseEnv []string

	mu    sync.Mutex
	execs map[string]context.CancelCauseFunc // running commands by ID

	jobs  *jobTable
	terms terminalTable
}

// NewServer returns an agent with opts.
func NewServer(opts ServerOptions) *Server {
	if opts.StateDir == "" {
		opts.StateDir = os.TempDir() + "/sbxd-jobs"
	}
	if opts.JobOutputLimit <= 0 {
		opts.JobOutputLimit = DefaultJobOutputLimit
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(agentMarkers, k)
	})
	s := &Server{opts: opts, log: log, baseEnv: env, execs: map[string]context.CancelCauseFunc{}}
	s.jobs = newJobTable(s)
	return s
}

// yamuxConfig is the session configuration both ends use.
func yamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	// A larger window than the default 256 KiB keeps file copies fast over
	// a stream with a few hundred microseconds of latency; memory stays
	// bounded by it per stream.
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.StreamOpenTimeout = 30 * time.Second
	cfg.StreamCloseTimeout = 30 * time.Second
	return cfg
}

// Serve answers requests arriving on conn until it closes or ctx ends, then
// kills the commands started through it that still run (background jobs
// keep running; see WaitJobs).
func (s *Server) Serve(ctx context.Context, conn io.ReadWriteCloser) error {
	sess, err := yamux.Server(conn, yamuxConfig())
	if err != nil {
		return err
	}
	// Every request's context derives from this session's, so ending the
	// session ends its commands and no other session's.
	sctx, end := context.WithCancelCause(ctx)
	hs := &http.Server{
		Handler:           s.Handler(),
		MaxHeaderBytes:    8 << 20,
		ReadHeaderTimeout: time.Minute,
		ErrorLog:          nil,
		BaseContext:       func(net.Listener) context.Context { return sctx },
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	err = hs.Serve(sess)
	sess.Close()
	hs.Close()
	end(errStreamClosed)
	if errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

var errStreamClosed = errors.New("the agent's stream closed")

// ServeListener serves every connection l accepts as Serve does, until l
// fails or ctx ends. It is how an agent started with its sandbox (sbxd init
// --agent) answers clients that dial it instead of starting their own.
func (s *Server) ServeListener(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			if err := s.Serve(ctx, conn); err != nil {
				s.log.Warn("serving a connection", "err", err)
			}
		}()
	}
}

// WaitJobs waits until every background job this agent started has ended
// (an agent whose client went away stays until then, so that its jobs'
// output is still collected).
func (s *Server) WaitJobs() { s.jobs.wait() }

// Handler is the agent's HTTP API, for serving over any transport.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+routeHello, s.handleHello)
	mux.HandleFunc("POST "+routeExec, s.handleExec)
	mux.HandleFunc("POST "+routeKill, s.handleKill)
	mux.HandleFunc("GET "+routeStat, s.handleStat)
	mux.HandleFunc("GET "+routeReadDir, s.handleReadDir)
	mux.HandleFunc("GET "+routeFile, s.handleRead)
	mux.HandleFunc("PUT "+routeFile, s.handleWrite)
	mux.HandleFunc("POST "+routeMkdir, s.handleMkdir)
	mux.HandleFunc("POST "+routeRemove, s.handleRemove)
	mux.HandleFunc("POST "+routeMove, s.handleMove)
	mux.HandleFunc("POST "+routeWalk, s.handleWalk)
	mux.HandleFunc("POST "+routeGlob, s.handleGlob)
	mux.HandleFunc("POST "+routeGrep, s.handleGrep)
	mux.HandleFunc("POST "+routeEdit, s.handleEdit)
	mux.HandleFunc("POST "+routePrepare, s.handlePrepare)
	mux.HandleFunc("POST "+routeJobs, s.handleJobStart)
	mux.HandleFunc("GET "+routeJobs, s.handleJobList)
	mux.HandleFunc("GET "+routeJobs+"/{id}", s.handleJobStatus)
	mux.HandleFunc("GET "+routeJobs+"/{id}/output", s.handleJobOutput)
	mux.HandleFunc("POST "+routeJobs+"/{id}/wait", s.handleJobWait)
	mux.HandleFunc("POST "+routeJobs+"/{id}/kill", s.handleJobKill)
	mux.HandleFunc("POST "+routeTerminal, s.handleTerminalStart)
	mux.HandleFunc("GET "+routeTerminal, s.handleTerminalList)
	mux.HandleFunc("POST "+routeTerminal+"/{id}/attach", s.handleTerminalAttach)
	mux.HandleFunc("POST "+routeTerminal+"/{id}/resize", s.handleTerminalResize)
	mux.HandleFunc("POST "+routeTerminal+"/{id}/kill", s.handleTerminalKill)
	return mux
}

func (s *Server) handleHello(w http.ResponseWriter, r *http.Request) {
	wd, _ := os.Getwd()
	writeJSON(w, hello{
		Protocol: advertisedProtocol(),
		Version:  Version,
		PID:      os.Getpid(),
		UID:      os.Getuid(),
		OS:       runtime.GOOS,
		Arch:     runtime.GOARCH,
		WorkDir:  wd,
		Sandbox:  s.opts.Sandbox,
	})
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) {
	var req killRequest
	if !readJSON(w, r, "kill", &req) {
		return
	}
	s.mu.Lock()
	cancel := s.execs[req.ID]
	s.mu.Unlock()
	if cancel != nil {
		cancel(errKilled)
	}
	writeJSON(w, struct{}{})
}

var errKilled = errors.New("killed by the client")

// maxJSONBody bounds JSON request bodies.
const maxJSONBody = 16 << 20

func readJSON(w http.ResponseWriter, r *http.Request, op string, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody))
	if err := dec.Decode(v); err != nil {
		writeError(w, op, "", errors.Join(errInvalid, err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// statusOf is the HTTP status for a wire error code.
func statusOf(code string) int {
	switch code {
	case codeNotExist:
		return http.StatusNotFound
	case codePermission:
		return http.StatusForbidden
	case codeExist, codeIsDir, codeNotDir, codeNotEmpty, codeNoMatch, codeNotUnique:
		return http.StatusConflict
	case codeInvalid:
		return http.StatusBadRequest
	case codeUnsupport:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// writeError answers a failed call. The message drops the path an
// *fs.PathError carries: the client puts back the name it was given.
func writeError(w http.ResponseWriter, op, path string, err error) {
	we := wireError{Code: codeOf(err), Op: op, Path: path, Msg: err.Error()}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		we.Msg = pe.Err.Error()
	}
	var nu *NotUniqueError
	switch {
	case errors.Is(err, ErrEditNoMatch):
		we.Code = codeNoMatch
	case errors.As(err, &nu):
		we.Code, we.Count = codeNotUnique, nu.Count
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(statusOf(we.Code))
	json.NewEncoder(w).Encode(we)
}
