package wait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// All is ready when every strategy is, checked one after another (so a
// later probe's deadline starts when the earlier ones passed), all within
// the combined deadline.
func All(strategies ...Strategy) *Multi { return &Multi{all: true, strategies: strategies} }

// Any is ready when one strategy is; the strategies run concurrently and
// the rest are stopped once one passes.
func Any(strategies ...Strategy) *Multi { return &Multi{strategies: strategies} }

// Multi combines strategies; see All and Any.
type Multi struct {
	all        bool
	strategies []Strategy
	// Timeout bounds the whole combination (0: DefaultTimeout).
	Timeout time.Duration
}

// WithTimeout sets the combined deadline.
func (m *Multi) WithTimeout(d time.Duration) *Multi { m.Timeout = d; return m }

func (m *Multi) String() string {
	names := make([]string, len(m.strategies))
	for i, s := range m.strategies {
		names[i] = s.String()
	}
	op := " or "
	if m.all {
		op = " and "
	}
	return strings.Join(names, op)
}

func (m *Multi) WaitUntilReady(ctx context.Context, sb backend.Sandbox) error {
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if len(m.strategies) == 0 {
		return nil
	}
	if m.all {
		for _, s := range m.strategies {
			if err := s.WaitUntilReady(ctx, sb); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make(chan error, len(m.strategies))
	for _, s := range m.strategies {
		go func() { errs <- s.WaitUntilReady(ctx, sb) }()
	}
	var all []error
	for range m.strategies {
		err := <-errs
		if err == nil {
			cancel() // stop the others; they return into the buffered channel
			return nil
		}
		all = append(all, err)
	}
	return fmt.Errorf("none of %d probes passed: %w", len(all), errors.Join(all...))
}
