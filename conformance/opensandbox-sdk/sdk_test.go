// Package opensandboxsdk runs OpenSandbox's official TypeScript SDK
// (@alibaba-group/opensandbox, pinned in package.json and package-lock.json)
// unchanged against sbx serve: conformance.mjs calls every SDK method in the
// SDK's default mode and with useServerProxy, on the local, lite and native
// backends. The SDK is installed with npm ci; node_modules is not committed.
//
// Without node, or without the SDK installed, the test skips; with
// SBX_REQUIRE_OPENSANDBOX_SDK=1 it installs the SDK (npm ci) and fails
// instead of skipping, also when a backend's prerequisites are missing.
package opensandboxsdk

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/harness"
)

// EnvRequire makes the test fail instead of skipping (CI sets it).
const EnvRequire = "SBX_REQUIRE_OPENSANDBOX_SDK"

// image is what the sandboxes run: bash for the SDK's sessions.
const image = dockertest.DebianImage

func TestOfficialSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		harness.Unavailable(t, EnvRequire, "node is not on PATH: %v", err)
	}
	if _, err := os.Stat("node_modules/@alibaba-group/opensandbox/package.json"); err != nil {
		if !harness.Required(EnvRequire) {
			t.Skipf("the SDK is not installed: run npm ci in conformance/opensandbox-sdk (or set %s=1)", EnvRequire)
		}
		npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	// sbx, with the sbx-full it hands sbx serve to next to it, as go
	// install puts them.
	bin := t.TempDir()
	sbx := filepath.Join(bin, "sbx")
	for _, name := range []string{"sbx", "sbx-full"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), "github.com/sandboxkit/sandboxkit/cmd/"+name).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
	}

	t.Run("local", func(t *testing.T) {
		dir := t.TempDir()
		runSDK(t, node, sbx, "local", `
[sandbox]
backend = "local"
[sandbox.local]
state_dir = "`+dir+`"
`)
	})
	t.Run("lite", func(t *testing.T) {
		var missing []string
		if os.Geteuid() != 0 {
			missing = append(missing, "root")
		}
		if _, err := exec.LookPath("runc"); err != nil {
			missing = append(missing, "runc")
		}
		if len(missing) > 0 {
			harness.Unavailable(t, EnvRequire, "the lite backend needs %s", strings.Join(missing, ", "))
		}
		dockertest.RequireImage(t, dockertest.Client(t), image) // lite takes it from the engine
		// Not t.TempDir: overlayfs options cannot hold a subtest's comma.
		dir, err := os.MkdirTemp("", "sbx-sdk-lite-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		runSDK(t, node, sbx, "lite", `
[sandbox]
backend = "lite"
[sandbox.lite]
state_dir = "`+dir+`/state"
image_dir = "`+dir+`/images"
runtime_root = "`+dir+`/runtime"
`)
	})
	t.Run("native", func(t *testing.T) {
		dockertest.RequireImage(t, dockertest.Client(t), image)
		runSDK(t, node, sbx, "native", `
[sandbox]
backend = "native"
`)
	})
}

// listening is serve's line saying where it listens.
var listening = regexp.MustCompile(`listening on http://(\S+)`)

// runSDK starts sbx serve with config (its serve and main sections added)
// on a loopback port of its choosing and runs conformance.mjs against it.
func runSDK(t *testing.T, node, sbx, backend, config string) {
	const key = "sdk-conformance-key"
	instance := fmt.Sprintf("sdk-conformance-%s-%d", backend, os.Getpid())
	cfg := filepath.Join(t.TempDir(), "sbx.toml")
	hostDir := t.TempDir() // a host path the SDK mounts
	if err := os.WriteFile(filepath.Join(hostDir, "hello.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	config += `
[sandbox.serve]
instance = "` + instance + `"
delete_on_shutdown = true
allowed_host_paths = ["` + hostDir + `"]
[sandbox.sandboxes.main]
image = "` + image + `"
`
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := exec.Command(sbx, "serve", "--listen", "127.0.0.1:0")
	serve.Env = append(os.Environ(), "SBX_CONFIG="+cfg, "SBX_API_KEY="+key)
	stderr, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	var log syncBuf
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			log.add(line + "\n")
			if m := listening.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		io.Copy(io.Discard, stderr)
		exited <- serve.Wait()
	}()
	t.Cleanup(func() {
		// The SDK's named volumes (native).
		if backend == "native" {
			for _, mode := range []string{"default", "proxy"} {
				exec.Command("docker", "volume", "rm", "-f", "osb-"+instance+"-sdk-"+mode).Run()
			}
		}
	})
	t.Cleanup(func() {
		// SIGTERM: serve removes its sandboxes (delete_on_shutdown).
		serve.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("sbx serve ended with %v:\n%s", err, log.String())
			}
		case <-time.After(60 * time.Second):
			serve.Process.Kill()
			t.Errorf("sbx serve did not stop within 60 s of SIGTERM:\n%s", log.String())
		}
	})
	var domain string
	select {
	case domain = <-addr:
	case err := <-exited:
		t.Fatalf("sbx serve ended before listening (%v):\n%s", err, log.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("sbx serve did not listen within 2 minutes:\n%s", log.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "conformance.mjs")
	cmd.Env = append(os.Environ(), "OPEN_SANDBOX_DOMAIN="+domain, "OPEN_SANDBOX_API_KEY="+key,
		"SBX_IMAGE="+image, "SBX_BACKEND="+backend, "SBX_HOST_DIR="+hostDir)
	out, err := cmd.CombinedOutput()
	t.Logf("conformance.mjs on %s:\n%s", backend, out)
	if err != nil {
		t.Fatalf("the official SDK failed against sbx serve on %s: %v", backend, err)
	}
	if !strings.Contains(string(out), "checks passed") {
		t.Fatalf("conformance.mjs did not finish")
	}
}

// syncBuf is serve's log, written by its reader and read by the test.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) add(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(line)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
