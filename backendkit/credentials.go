package backendkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// credentialCommandTimeout bounds a credential's from_command.
const credentialCommandTimeout = 30 * time.Second

// CredentialValue reads the value of credential c from its source, outside
// the sandbox: an environment variable of this process, a file, or a
// command's output (trailing white space trimmed). Errors name the
// credential and the source, never a value or a command's output.
func CredentialValue(ctx context.Context, c backend.Credential) (string, error) {
	src := c.From
	var v string
	switch {
	case src.Env != "":
		val, ok := os.LookupEnv(src.Env)
		if !ok {
			return "", fmt.Errorf("credential %s: $%s is not set in the environment of the process creating the sandbox", c.Name, src.Env)
		}
		v = val
	case src.File != "":
		data, err := os.ReadFile(src.File)
		if err != nil {
			return "", fmt.Errorf("credential %s: reading from_file: %w", c.Name, err)
		}
		v = string(data)
	case len(src.Command) > 0:
		ctx, cancel := context.WithTimeout(ctx, credentialCommandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, src.Command[0], src.Command[1:]...)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("it exited with %d", ee.ExitCode())
			}
			return "", fmt.Errorf("credential %s: from_command: %w", c.Name, err)
		}
		v = out.String()
	default:
		return "", fmt.Errorf("%w: credential %s has no source (from_env, from_file or from_command)", backend.ErrInvalidConfig, c.Name)
	}
	v = strings.TrimRight(v, " \t\r\n")
	if v == "" {
		return "", fmt.Errorf("credential %s: its source gave an empty value", c.Name)
	}
	return v, nil
}
