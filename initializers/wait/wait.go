// Package wait holds readiness probes for sandboxes, in the spirit of
// testcontainers-go's wait strategies: a TCP port that accepts, an HTTP
// answer with a status and body, a line in the sandbox's log, a command's
// exit code, an MCP initialize handshake, an SSE endpoint, or any check
// of one's own, combined with All and Any.
//
// Every probe has a deadline and a poll interval: a probe that never
// succeeds fails when its deadline runs out (or ctx ends, whichever is
// first), with an error that says what it last saw. Nothing here loops
// without a bound.
//
// Probes dial what a host program can dial: the address a sandbox port is
// published at (backend.Endpointer). Exec and log probes work on any
// backend with Exec (log probes need backend.LogReader).
package wait

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Defaults of a probe's deadline and poll interval.
const (
	DefaultTimeout      = 60 * time.Second
	DefaultPollInterval = 250 * time.Millisecond
)

// Strategy is a readiness probe.
type Strategy interface {
	// WaitUntilReady returns nil once sb is ready, or an error when the
	// probe's deadline or ctx ends first.
	WaitUntilReady(ctx context.Context, sb backend.Sandbox) error
	// String describes the probe in errors and progress ("tcp port 7687").
	String() string
}

// ErrNotReady wraps the error of a probe whose deadline ran out.
var ErrNotReady = errors.New("not ready")

// Check is one attempt of a probe: nil means ready. An error wrapping
// Permanent stops polling at once (the answer cannot change by waiting).
type Check func(ctx context.Context, sb backend.Sandbox) error

// Permanent marks a check's error as final.
func Permanent(err error) error { return &permanentError{err} }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Poll is a Strategy made of a Check repeated every PollInterval until it
// passes or Timeout runs out. All the probes of this package are Polls.
type Poll struct {
	Name         string
	Check        Check
	Timeout      time.Duration // 0: DefaultTimeout
	PollInterval time.Duration // 0: DefaultPollInterval
	// AttemptTimeout bounds one attempt (0: the poll interval's 4 times,
	// at least 2s), so one hung dial cannot eat the deadline.
	AttemptTimeout time.Duration
}

// ForFunc polls check under name.
func ForFunc(name string, check Check) *Poll { return &Poll{Name: name, Check: check} }

// WithTimeout sets the deadline.
func (p *Poll) WithTimeout(d time.Duration) *Poll { p.Timeout = d; return p }

// WithPollInterval sets the time between attempts.
func (p *Poll) WithPollInterval(d time.Duration) *Poll { p.PollInterval = d; return p }

func (p *Poll) String() string { return p.Name }

// WaitUntilReady polls p.Check until it passes, fails permanently, or the
// deadline or ctx ends.
func (p *Poll) WaitUntilReady(ctx context.Context, sb backend.Sandbox) error {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	interval := p.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	attempt := p.AttemptTimeout
	if attempt <= 0 {
		attempt = max(4*interval, 2*time.Second)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for n := 1; ; n++ {
		actx, acancel := context.WithTimeout(ctx, attempt)
		err := p.Check(actx, sb)
		acancel()
		if err == nil {
			return nil
		}
		if _, ok := errors.AsType[*permanentError](err); ok {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		// An attempt cut short by the overall deadline says less than
		// the one before it.
		if dl, _ := ctx.Deadline(); last == nil || (ctx.Err() == nil && time.Now().Before(dl)) {
			last = err
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("%s: %w; last: %v", p.Name, context.Cause(parent), last)
			}
			return fmt.Errorf("%s: %w after %s (%d attempts); last: %v", p.Name, ErrNotReady, timeout, n, last)
		case <-tick.C:
		}
	}
}

// endpoint returns the host address of sb's TCP port.
func endpoint(ctx context.Context, sb backend.Sandbox, port int) (string, error) {
	ep, ok := backend.As[backend.Endpointer](sb)
	if !ok {
		return "", Permanent(fmt.Errorf("the sandbox publishes no ports (its backend has no Endpoint): %w", errors.ErrUnsupported))
	}
	addr, err := ep.Endpoint(ctx, port)
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) || errors.Is(err, backend.ErrInvalidConfig) {
			return "", Permanent(err)
		}
		return "", err
	}
	return addr, nil
}
