package initializers

import (
	"errors"
	"fmt"

	"github.com/sandboxkit/sandboxkit/backend"
)

var (
	errNegative            = errors.New("must not be negative")
	errSeconds             = errors.New(`want a number of seconds or a duration such as "90s"`)
	errUnsupportedEndpoint = fmt.Errorf("the sandbox's backend publishes no ports: %w", errors.ErrUnsupported)
)

// invalidf returns an error wrapping backend.ErrInvalidConfig.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", backend.ErrInvalidConfig, fmt.Sprintf(format, args...))
}
