// Package harness holds what the test helpers for real components
// (dockertest, remotetest, k8stest) share: the SBX_REQUIRE_* switch that
// turns "component missing" skips into failures, and running a
// scripts/NAME-harness.sh and reading the environment file it writes.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/rootfs"
)

// Required reports whether the variable env (SBX_REQUIRE_DOCKER, ...) asks
// for the component.
func Required(env string) bool {
	v := os.Getenv(env)
	return v != "" && v != "0" && v != "false"
}

// Unavailable skips t, or fails it when env requires the component.
func Unavailable(t testing.TB, env, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required(env) {
		t.Fatalf("%s (%s=1 makes this a failure)", msg, env)
	}
	t.Skip(msg)
}

// Script finds scripts/name above the working directory (a test's package
// directory).
func Script(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("scripts/%s not found above the working directory", name)
		}
		dir = parent
	}
}

// Up finds scripts/name and runs `name up` (idempotent and quick when the
// harness is up already), within timeout. It returns the script's path.
func Up(name string, timeout time.Duration) (string, error) {
	script, err := Script(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, script, "up").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s up: %v\n%s", script, err, out)
	}
	return script, nil
}

// ReadEnv reads the KEY=VALUE lines of a harness's environment file;
// script names the harness in the error.
func ReadEnv(path, script string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the harness environment: %v (run scripts/%s up)", err, script)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

// RequireLite skips t, or fails it with SBX_REQUIRE_LITE=1, unless this
// host runs lite sandboxes of a busybox root file system: root, runc and
// busybox-static.
func RequireLite(t testing.TB) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		missing = append(missing, "runc")
	}
	if _, err := rootfs.BusyboxPath(); err != nil {
		missing = append(missing, "busybox (busybox-static)")
	}
	if len(missing) > 0 {
		Unavailable(t, "SBX_REQUIRE_LITE", "the lite backend needs %s", strings.Join(missing, ", "))
	}
}
