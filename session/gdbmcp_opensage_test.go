package session_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/session"
)

var (
	standinOnce  sync.Once
	standinImage string
	standinErr   error
)

// gdbMCPStandinImage builds the stand-in of OpenSage's gdb_mcp image
// (reused while fakeservice's source is unchanged): the busybox test image
// with initializers/internal/fakeservice, whose command serves MCP over SSE
// on 1111 (/mcp answers Not Implemented), and /bin/bash running sh, for
// OpenSage's `bash script` calls. Built locally, no registry.
func gdbMCPStandinImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	standinOnce.Do(func() {
		tag, err := fakeserviceTag()
		if err != nil {
			standinErr = err
			return
		}
		ref := "sandboxkit-test/gdb-mcp-standin:" + tag
		ctx := context.Background()
		if _, err := cli.ImageInspect(ctx, ref); err == nil {
			standinImage = ref
			return
		}
		data, err := buildFakeservice()
		if err != nil {
			standinErr = err
			return
		}
		dockerfile := "FROM " + dockertest.BusyboxImage + "\n" +
			"COPY fakeservice /usr/local/bin/fakeservice\n" +
			`RUN printf '#!/bin/sh\nexec /bin/sh "$@"\n' > /bin/bash && chmod 755 /bin/bash` + "\n" +
			`CMD ["fakeservice", "mcp-sse", "1111"]` + "\n"
		var ctxTar bytes.Buffer
		tw := tar.NewWriter(&ctxTar)
		for _, f := range []struct {
			name string
			data []byte
			mode int64
		}{{"Dockerfile", []byte(dockerfile), 0o644}, {"fakeservice", data, 0o755}} {
			tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))})
			tw.Write(f.data)
		}
		tw.Close()
		resp, err := cli.ImageBuild(ctx, &ctxTar, build.ImageBuildOptions{Tags: []string{ref}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
		if err != nil {
			standinErr = err
			return
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if _, err := cli.ImageInspect(ctx, ref); err != nil {
			standinErr = fmt.Errorf("building %s: %v\n%s", ref, err, out)
			return
		}
		standinImage = ref
	})
	if standinErr != nil {
		t.Fatal(standinErr)
	}
	return standinImage
}

// scriptsDir writes OpenSage-shaped sandbox scripts (name -> content) into
// a folder for Launcher.SandboxScriptsDir.
func scriptsDir(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range scripts {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// compileDebugStandin stands in for OpenSage's ossfuzz/compile_debug.sh:
// it moves /out aside and builds into a fresh one, or fails after the
// move when $STANDIN_FAIL is set.
const compileDebugStandin = `set -e
rm -rf /out.bak
if [ -e /out ]; then mv /out /out.bak; fi
mkdir -p /out
if [ -n "$STANDIN_FAIL" ]; then echo "compile: error: $STANDIN_FAIL" >&2; exit 1; fi
echo "-g3 -O0" > /out/debug-build
`

// An entry shaped like OpenSage's gdb_mcp (its image's own command serves
// MCP over SSE on 1111: command = "") launches at once: the debug build
// script runs first, nothing is injected, readiness is the SSE endpoint,
// and an MCP client of the SSE transport (as OpenSage's) lists and calls
// the image's tools. A failing debug build fails the launch, naming the
// step, with /out restored.
func TestGDBMCPImageServesItself(t *testing.T) {
	cli := dockertest.Client(t)
	image := gdbMCPStandinImage(t, cli)
	scripts := scriptsDir(t, map[string]string{"ossfuzz/compile_debug.sh": compileDebugStandin})
	entry := func(env string) string {
		return `[sandbox.sandboxes.gdb_mcp]
image = "` + image + `"
command = ""
environment = { ` + env + ` }
[sandbox.sandboxes.gdb_mcp.extra]
initializer_timeout_sec = 120
`
	}
	start := time.Now()
	s, err := (&session.Launcher{Config: nativeConfig(t, entry(`GDB = "1"`)), SandboxScriptsDir: scripts}).Launch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, s)
	t.Logf("launched in %s", time.Since(start))
	h, err := sandboxkit.HandleOf[*initializers.GDBMCP](s, "gdb_mcp")
	if err != nil {
		t.Fatal(err)
	}
	if !h.SSEOnly || h.URL() != h.SSEURL() || !strings.HasSuffix(s.Env["GDB_MCP_URL"], "/sse") {
		t.Errorf("handle %+v (URL %s), GDB_MCP_URL %s: want the image's SSE endpoint", h, h.URL(), s.Env["GDB_MCP_URL"])
	}
	sb, _ := s.Sandbox("gdb_mcp")
	if out := execOut(t, sb, "sh", "-c", "cat /out/debug-build; test -e /opt/sandboxkit/gdbmcp && echo injected || echo not-injected"); out != "-g3 -O0\nnot-injected\n" {
		t.Errorf("in the sandbox: %q", out)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "opensage-like", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.SSEClientTransport{Endpoint: h.SSEURL()}, nil)
	if err != nil {
		t.Fatalf("MCP over SSE at %s: %v", h.SSEURL(), err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "gdb_command", Arguments: map[string]any{"command": "info registers"}})
	if err != nil || len(res.Content) == 0 {
		t.Fatalf("calling the image's tool: %v, %+v", err, res)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "stand-in gdb: info registers" {
		t.Errorf("tool answered %q", text)
	}

	// A failing debug build fails the launch, naming the step and the
	// end of its output.
	_, err = (&session.Launcher{Config: nativeConfig(t, entry(`STANDIN_FAIL = "no compiler"`)), SandboxScriptsDir: scripts}).Launch(t.Context())
	if err == nil || !strings.Contains(err.Error(), `"gdb_mcp": debug build: bash /sandbox_scripts/ossfuzz/compile_debug.sh`) ||
		!strings.Contains(err.Error(), "compile: error: no compiler") {
		t.Errorf("a failing debug build: %v", err)
	}
}

// With sandboxkit's gdbmcp injected (the entry runs a command of its own)
// into an image where another program already serves port 1111, the
// launch fails at once, naming the port and gdbmcp's log ("address already
// in use"), instead of waiting up to initializer_timeout_sec for an MCP
// handshake.
func TestGDBMCPInjectedBindFails(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, gdbImage)
	// The debug build step waits until the image's own server listens,
	// so gdbmcp always comes second.
	scripts := scriptsDir(t, map[string]string{"ossfuzz/compile_debug.sh": `for i in $(seq 300); do
  python3 -c 'import socket; socket.create_connection(("127.0.0.1", 1111), 1)' 2>/dev/null && exit 0
  python3 -c 'import time; time.sleep(0.1)'
done
echo "the image's server never listened" >&2; exit 1
`})
	cfg := nativeConfig(t, `[sandbox.sandboxes.gdb_mcp]
image = "`+gdbImage+`"
command = "python3 -m http.server 1111"
[sandbox.sandboxes.gdb_mcp.extra]
initializer_timeout_sec = 1800
`)
	start := time.Now()
	_, err := (&session.Launcher{Config: cfg, SandboxScriptsDir: scripts}).Launch(t.Context())
	took := time.Since(start)
	t.Logf("failed after %s: %v", took, err)
	if err == nil {
		t.Fatal("the launch succeeded with another program on gdbmcp's port")
	}
	for _, want := range []string{"sandboxkit's gdbmcp does not serve port 1111", "another program answers on port 1111", "address already in use", `command = ""`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if took > 2*time.Minute {
		t.Errorf("the launch took %s to fail", took)
	}
	if se, ok := errors.AsType[*session.Error](err); !ok || se.Step != "provision" {
		t.Errorf("want a provision failure, got %T %v", err, err)
	}
}
