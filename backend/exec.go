package backend

import (
	"fmt"
	"io"
	"time"
)

// DefaultOutputLimit caps the bytes ExecResult keeps of each output stream
// when the caller gives no writer for it.
const DefaultOutputLimit = 4 << 20

// TimeoutExitCode is the exit code of a command killed by its timeout, as
// timeout(1) reports it.
const TimeoutExitCode = 124

// ExecRequest is one command to run in a sandbox.
//
// Exactly one of Cmd (an argv, run without a shell) and Shell (a script run by
// "sh -c") is set. Env adds to the sandbox's environment. WorkDir defaults to
// the sandbox's working directory and User to its default user.
//
// Stdout and Stderr, when set, receive output as it is produced and are not
// captured; otherwise output is captured into ExecResult up to OutputLimit
// bytes per stream (DefaultOutputLimit when zero, no cap when negative). Bytes
// past the cap are read and dropped, never buffered, so a command printing
// gigabytes costs the host no memory; ExecResult.Truncated reports it.
//
// Stdout and Stderr may be the same writer; the backend then never calls it
// from two goroutines at once.
//
// Exec returns when the command exits; it does not wait for Stdin to reach
// EOF. A User the backend cannot honour (Capabilities.User false) fails with
// an error wrapping errors.ErrUnsupported.
//
// Timeout (zero: none) kills the command's whole process tree inside the
// sandbox and reports exit code 124 with TimedOut set. Cancelling the context
// kills it as well and makes Exec return an error wrapping the context's
// error. Nothing started by the command keeps running after either.
type ExecRequest struct {
	Cmd     []string
	Shell   string
	Env     map[string]string
	WorkDir string
	User    string

	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	Timeout     time.Duration
	OutputLimit int64
}

// ExecResult is what a finished command left.
type ExecResult struct {
	// ExitCode is the command's exit status; 124 after a timeout; 128+N
	// when killed by signal N.
	ExitCode int
	// Stdout and Stderr hold captured output (nil for streams that went to
	// a caller's writer).
	Stdout []byte
	Stderr []byte
	// Truncated reports that bytes past OutputLimit were dropped.
	Truncated bool
	TimedOut  bool
	Duration  time.Duration
}

// Argv returns the command line to run: Cmd, or sh -c Shell. It fails when
// neither or both are set, wrapping ErrInvalidConfig.
func (r ExecRequest) Argv() ([]string, error) {
	switch {
	case len(r.Cmd) > 0 && r.Shell != "":
		return nil, fmt.Errorf("%w: exec request sets both Cmd and Shell", ErrInvalidConfig)
	case len(r.Cmd) > 0:
		return r.Cmd, nil
	case r.Shell != "":
		return []string{"sh", "-c", r.Shell}, nil
	}
	return nil, fmt.Errorf("%w: exec request has no command (set Cmd or Shell)", ErrInvalidConfig)
}

// Limit returns the effective per-stream capture limit (negative: none).
func (r ExecRequest) Limit() int64 {
	if r.OutputLimit == 0 {
		return DefaultOutputLimit
	}
	return r.OutputLimit
}

// Capture is an io.Writer that keeps the first Limit bytes written to it and
// counts, then drops, the rest. Backends use it for ExecResult's captured
// streams. A negative limit keeps everything. It is not safe for concurrent
// use.
type Capture struct {
	limit     int64
	buf       []byte
	truncated bool
}

// NewCapture returns a Capture keeping at most limit bytes.
func NewCapture(limit int64) *Capture { return &Capture{limit: limit} }

// Write keeps what fits and always reports the whole of p as written, so a
// command's output is drained even after the cap.
func (c *Capture) Write(p []byte) (int, error) {
	if c.limit < 0 {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	room := c.limit - int64(len(c.buf))
	if int64(len(p)) > room {
		c.truncated = true
		c.buf = append(c.buf, p[:max(room, 0)]...)
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// Bytes returns what was kept (nil when nothing was written).
func (c *Capture) Bytes() []byte { return c.buf }

// Truncated reports whether bytes were dropped.
func (c *Capture) Truncated() bool { return c.truncated }

// Outputs prepares the stdout and stderr writers for running req: the
// caller's writers, or Captures within the request's limit. Finish copies the
// captured bytes into an ExecResult. It is the one place every backend gets
// the output-capture rules from.
type Outputs struct {
	Stdout, Stderr io.Writer
	outCap, errCap *Capture
}

// NewOutputs returns the writers to connect to a command run for req.
func NewOutputs(req ExecRequest) *Outputs {
	o := &Outputs{Stdout: req.Stdout, Stderr: req.Stderr}
	if o.Stdout == nil {
		o.outCap = NewCapture(req.Limit())
		o.Stdout = o.outCap
	}
	if o.Stderr == nil {
		o.errCap = NewCapture(req.Limit())
		o.Stderr = o.errCap
	}
	return o
}

// Finish stores captured output and the truncation flag in res.
func (o *Outputs) Finish(res *ExecResult) {
	if o.outCap != nil {
		res.Stdout = o.outCap.Bytes()
		res.Truncated = res.Truncated || o.outCap.Truncated()
	}
	if o.errCap != nil {
		res.Stderr = o.errCap.Bytes()
		res.Truncated = res.Truncated || o.errCap.Truncated()
	}
}
