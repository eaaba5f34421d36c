package initializers

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// MainType is the agent's workspace.
const MainType = "main"

// MainConfig is [sandbox.sandboxes.main.extra]. The workspace's image,
// working_dir, environment and volumes are the entry's own keys.
type MainConfig struct {
	Common
	// Packages are installed with pip on first boot (auxilia's
	// OPEN_SANDBOX_DEFAULT_PACKAGES); a failed install fails the launch
	// with pip's output.
	Packages []string `toml:"packages"`
	// Pip is the pip command line, split on spaces. Default
	// "python3 -m pip".
	Pip string `toml:"pip"`
	// PipArgs are added to pip install (e.g. ["--index-url", "..."]).
	PipArgs []string `toml:"pip_args"`
}

// MainFactory is the main initializer.
func MainFactory() Factory {
	return Factory{
		NewConfig: func() any { return &MainConfig{Pip: "python3 -m pip"} },
		New: func(cfg any) (Initializer, error) {
			c := cfg.(*MainConfig)
			for _, p := range c.Packages {
				if strings.TrimSpace(p) == "" || strings.HasPrefix(p, "-") {
					return nil, invalidf("packages: %q is not a package requirement (put pip options in pip_args)", p)
				}
			}
			if len(strings.Fields(c.Pip)) == 0 {
				return nil, invalidf(`pip: empty (default "python3 -m pip")`)
			}
			return &Main{Config: *c}, nil
		},
	}
}

// Main is the agent's workspace.
type Main struct {
	Generic
	Config MainConfig
}

// mainMarker records which packages were installed, so a sandbox started
// from a checkpoint of itself does not install them again.
const mainMarker = "/var/tmp/.sandboxkit-main-packages"

// pipTimeout bounds one pip install when ctx has no deadline.
const pipTimeout = 15 * time.Minute

// Provision installs Config.Packages with pip, unless the marker says they
// are installed already.
func (m *Main) Provision(ctx context.Context, in *Instance) error {
	if len(m.Config.Packages) == 0 {
		return nil
	}
	want := strings.Join(slices.Sorted(slices.Values(m.Config.Packages)), "\n") + "\n"
	if rc, err := sbfiles.ReadFile(ctx, in.Sandbox, mainMarker); err == nil {
		var got bytes.Buffer
		_, err := got.ReadFrom(rc)
		rc.Close()
		if err == nil && got.String() == want {
			in.Status("packages installed already")
			return nil
		}
	}
	argv := slices.Concat(strings.Fields(m.Config.Pip), []string{"install", "--no-input", "--disable-pip-version-check"},
		m.Config.PipArgs, m.Config.Packages)
	in.Status("pip install " + strings.Join(m.Config.Packages, " "))
	timeout := pipTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := in.Sandbox.Exec(ctx, backend.ExecRequest{Cmd: argv, Timeout: timeout})
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	if res.ExitCode != 0 {
		out := lastLines(string(res.Stdout)+string(res.Stderr), 20)
		if res.TimedOut {
			return fmt.Errorf("%s: timed out after %s:\n%s", strings.Join(argv, " "), timeout.Round(time.Second), out)
		}
		return fmt.Errorf("%s: exit code %d:\n%s", strings.Join(argv, " "), res.ExitCode, out)
	}
	if err := sbfiles.WriteFile(ctx, in.Sandbox, mainMarker, strings.NewReader(want), 0o644); err != nil {
		in.Logger.Warn("recording installed packages failed", "err", err)
	}
	return nil
}

// lastLines returns the last n lines of s, trimmed.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
