package agent

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
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
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
	// (see sbxd.Client: a dialled agent must name the sandbox it was dialled
	// for).
	Sandbox string
}

// DefaultJobOutputLimit is how many bytes of a background job's most recent
// output the agent keeps on disk.
const DefaultJobOutputLimit = 8 << 20

// Server is the agent: it answers requests that arrive over one stream
// (the stdin and stdout of `sbxd serve`). Commands it starts run in process
// groups of their own, marked with sbxdwire.EnvExecID (SBX_EXEC_ID).
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

// Serve answers requests arriving on conn until it closes or ctx ends, then
// kills the commands started through it that still run (background jobs
// keep running; see WaitJobs).
func (s *Server) Serve(ctx context.Context, conn io.ReadWriteCloser) error {
	sess, err := yamux.Server(conn, sbxdwire.YamuxConfig())
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
	mux.HandleFunc("GET "+sbxdwire.RouteHello, s.handleHello)
	mux.HandleFunc("POST "+sbxdwire.RouteExec, s.handleExec)
	mux.HandleFunc("POST "+sbxdwire.RouteKill, s.handleKill)
	mux.HandleFunc("GET "+sbxdwire.RouteStat, s.handleStat)
	mux.HandleFunc("GET "+sbxdwire.RouteReadDir, s.handleReadDir)
	mux.HandleFunc("GET "+sbxdwire.RouteFile, s.handleRead)
	mux.HandleFunc("PUT "+sbxdwire.RouteFile, s.handleWrite)
	mux.HandleFunc("POST "+sbxdwire.RouteMkdir, s.handleMkdir)
	mux.HandleFunc("POST "+sbxdwire.RouteRemove, s.handleRemove)
	mux.HandleFunc("POST "+sbxdwire.RouteMove, s.handleMove)
	mux.HandleFunc("POST "+sbxdwire.RouteWalk, s.handleWalk)
	mux.HandleFunc("POST "+sbxdwire.RouteGlob, s.handleGlob)
	mux.HandleFunc("POST "+sbxdwire.RouteGrep, s.handleGrep)
	mux.HandleFunc("POST "+sbxdwire.RouteEdit, s.handleEdit)
	mux.HandleFunc("POST "+sbxdwire.RoutePrepare, s.handlePrepare)
	mux.HandleFunc("POST "+sbxdwire.RouteJobs, s.handleJobStart)
	mux.HandleFunc("GET "+sbxdwire.RouteJobs, s.handleJobList)
	mux.HandleFunc("GET "+sbxdwire.RouteJobs+"/{id}", s.handleJobStatus)
	mux.HandleFunc("GET "+sbxdwire.RouteJobs+"/{id}/output", s.handleJobOutput)
	mux.HandleFunc("POST "+sbxdwire.RouteJobs+"/{id}/wait", s.handleJobWait)
	mux.HandleFunc("POST "+sbxdwire.RouteJobs+"/{id}/kill", s.handleJobKill)
	mux.HandleFunc("POST "+sbxdwire.RouteTerminal, s.handleTerminalStart)
	mux.HandleFunc("GET "+sbxdwire.RouteTerminal, s.handleTerminalList)
	mux.HandleFunc("POST "+sbxdwire.RouteTerminal+"/{id}/attach", s.handleTerminalAttach)
	mux.HandleFunc("POST "+sbxdwire.RouteTerminal+"/{id}/resize", s.handleTerminalResize)
	mux.HandleFunc("POST "+sbxdwire.RouteTerminal+"/{id}/kill", s.handleTerminalKill)
	return mux
}

func (s *Server) handleHello(w http.ResponseWriter, r *http.Request) {
	wd, _ := os.Getwd()
	writeJSON(w, sbxdwire.Hello{
		Protocol: advertisedProtocol(),
		Version:  sbxdwire.Version,
		PID:      os.Getpid(),
		UID:      os.Getuid(),
		OS:       runtime.GOOS,
		Arch:     runtime.GOARCH,
		WorkDir:  wd,
		Sandbox:  s.opts.Sandbox,
	})
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.KillRequest
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
		writeError(w, op, "", errors.Join(sbxdwire.ErrInvalid, err))
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
	case sbxdwire.CodeNotExist:
		return http.StatusNotFound
	case sbxdwire.CodePermission:
		return http.StatusForbidden
	case sbxdwire.CodeExist, sbxdwire.CodeIsDir, sbxdwire.CodeNotDir, sbxdwire.CodeNotEmpty, sbxdwire.CodeNoMatch, sbxdwire.CodeNotUnique:
		return http.StatusConflict
	case sbxdwire.CodeInvalid:
		return http.StatusBadRequest
	case sbxdwire.CodeUnsupport:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// writeError answers a failed call. The message drops the path an
// *fs.PathError carries: the client puts back the name it was given.
func writeError(w http.ResponseWriter, op, path string, err error) {
	we := sbxdwire.ErrorBody{Code: sbxdwire.CodeOf(err), Op: op, Path: path, Msg: err.Error()}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		we.Msg = pe.Err.Error()
	}
	var nu *sbxdwire.NotUniqueError
	switch {
	case errors.Is(err, sbxdwire.ErrEditNoMatch):
		we.Code = sbxdwire.CodeNoMatch
	case errors.As(err, &nu):
		we.Code, we.Count = sbxdwire.CodeNotUnique, nu.Count
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(statusOf(we.Code))
	json.NewEncoder(w).Encode(we)
}

// NewCoalescingWriter returns w with small yamux data frames written in one
// call (header and body together), for an end of the stream whose writes
// are relayed one by one, as an attached exec's are: `sbxd serve` wraps
// its stdout in it, and the client its stdin. It is for one writer
// goroutine (yamux's send loop).
func NewCoalescingWriter(w io.Writer) io.Writer { return sbxdwire.NewCoalescingWriter(w) }
