package initializers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
	"github.com/sandboxkit/sandboxkit/internal/gdbmcpbin"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// GDBMCPType is gdb behind an MCP server: sandboxkit's (cmd/gdbmcp),
// injected into any image that has gdb, or the image's own (OpenSage's
// gdb_mcp image serves MCP over SSE from its command).
const GDBMCPType = "gdb_mcp"

// DefaultGDBMCPPort is the MCP server's port inside the sandbox.
const DefaultGDBMCPPort = 1111

// GDBMCPPath is the MCP endpoint's path on the server (streamable HTTP;
// /sse serves the older SSE transport).
const GDBMCPPath = "/mcp"

// GDBMCPSSEPath is the gdb MCP server's SSE endpoint (the transport
// OpenSage's gdb_mcp image serves).
const GDBMCPSSEPath = "/sse"

// The gdb_mcp [extra] server values: which MCP server the sandbox runs.
const (
	// GDBMCPServerAuto: the image's own when the entry runs the image's
	// command (command = "", as OpenSage's gdb_mcp entries do), else
	// sandboxkit's injected one.
	GDBMCPServerAuto = "auto"
	// GDBMCPServerImage: the image's own command serves MCP over SSE on
	// port; nothing is injected.
	GDBMCPServerImage = "image"
	// GDBMCPServerInject: sandboxkit's gdbmcp, copied into the sandbox.
	GDBMCPServerInject = "inject"
)

// Where the injected server and its log go inside the sandbox, and
// OpenSage's debug build script under the session's sandbox_scripts.
const (
	gdbmcpInstallPath  = "/opt/sandboxkit/gdbmcp"
	gdbmcpLogPath      = "/tmp/sandboxkit-gdbmcp.log"
	compileDebugScript = "/ossfuzz/compile_debug.sh"
)

// GDBMCPConfig is [sandbox.sandboxes.gdb_mcp.extra].
type GDBMCPConfig struct {
	Common
	// Port the MCP server listens on inside the sandbox. Default 1111.
	Port int `toml:"port"`
	// Server is which MCP server runs: "auto" (default), "image" or
	// "inject" (see the GDBMCPServer* constants).
	Server string `toml:"server"`
	// GDB is the gdb program in the image. Default "gdb".
	GDB string `toml:"gdb"`
	// WorkDir is where programs are debugged from ("": the sandbox's
	// working directory).
	WorkDir string `toml:"work_dir"`
	// LoadGDBInit: gdb reads its init files (the image's gdbinit, such
	// as pwndbg's in OpenSage's image). Default true; false starts gdb
	// with -nx.
	LoadGDBInit bool `toml:"load_gdbinit"`
	// BinaryPath is a host path of a static gdbmcp binary for the
	// sandbox's architecture, instead of the embedded one (also: env
	// SBX_GDBMCP_PATH).
	BinaryPath string `toml:"binary_path"`
	// CompileTimeout bounds OpenSage's ossfuzz/compile_debug.sh, run
	// first when the session's sandbox scripts have it. Default 3600 s.
	CompileTimeout Seconds `toml:"compile_timeout_sec"`
}

// GDBMCPFactory is the gdb_mcp initializer.
func GDBMCPFactory() Factory {
	return Factory{
		NewConfig: func() any {
			return &GDBMCPConfig{Port: DefaultGDBMCPPort, Server: GDBMCPServerAuto, GDB: "gdb", LoadGDBInit: true,
				CompileTimeout: Seconds(DefaultScriptTimeout)}
		},
		New: func(cfg any) (Initializer, error) {
			c := cfg.(*GDBMCPConfig)
			if c.Port < 1 || c.Port > 65535 {
				return nil, invalidf("port %d: want 1-65535", c.Port)
			}
			switch c.Server {
			case GDBMCPServerAuto, GDBMCPServerImage, GDBMCPServerInject:
			default:
				return nil, invalidf(`server %q: want "auto" (the image's own server when command = "", else sandboxkit's), "image" or "inject"`, c.Server)
			}
			if strings.TrimSpace(c.GDB) == "" {
				return nil, invalidf(`gdb: empty (default "gdb")`)
			}
			if c.BinaryPath != "" {
				if _, err := os.Stat(c.BinaryPath); err != nil {
					return nil, invalidf("binary_path: %v", err)
				}
			}
			if c.CompileTimeout <= 0 {
				return nil, invalidf("compile_timeout_sec: want a positive number of seconds (default 3600)")
			}
			return &GDBMCPInit{Config: *c, imageServes: c.Server == GDBMCPServerImage}, nil
		},
	}
}

// GDBMCPInit is the gdb_mcp initializer for one entry.
//
// Provision first runs OpenSage's debug build when the session's sandbox
// scripts have it (bash <sandbox_scripts>/ossfuzz/compile_debug.sh, with
// compile_timeout_sec; it moves /out to /out.bak and rebuilds with -g3
// -O0), restoring /out from /out.bak when it fails, as OpenSage does.
//
// Then the MCP server. OpenSage's gdb_mcp image starts its own (SSE only)
// from its command, which its entries run with command = "": such an
// entry (or extra.server = "image") uses the image's server, nothing is
// injected, and the sandbox is ready once GET /sse answers with an event
// stream, as OpenSage checks it. Otherwise sandboxkit's gdbmcp is copied
// in and started, and it must be the server that answers on the port: if
// another program holds it (the image's own server, started by its
// entrypoint), the launch fails at once naming the port and gdbmcp's
// log, instead of waiting for a handshake that never comes.
type GDBMCPInit struct {
	Generic
	Config GDBMCPConfig
	// imageServes: the image's own command serves MCP (set by Plan).
	imageServes bool
}

// Spec publishes the MCP port; the image is the entry's (it needs gdb).
func (g *GDBMCPInit) Spec() backend.Spec {
	return backend.Spec{Ports: []backend.Port{{Port: g.Config.Port, Protocol: "tcp"}}}
}

// Plan picks the server: with server "auto", the image's own when the
// sandbox runs the image's command.
func (g *GDBMCPInit) Plan(spec backend.Spec) {
	switch g.Config.Server {
	case GDBMCPServerAuto:
		g.imageServes = spec.ImageCommand
	default:
		g.imageServes = g.Config.Server == GDBMCPServerImage
	}
}

// Provision runs the debug build (when the scripts have it), then copies
// the gdbmcp server into the sandbox and starts it, unless the image
// serves MCP itself; it returns once the server listens.
func (g *GDBMCPInit) Provision(ctx context.Context, in *Instance) error {
	if err := g.compileDebug(ctx, in); err != nil {
		return err
	}
	if g.imageServes {
		in.Status("the image serves MCP itself (its own command): nothing injected")
		return nil
	}
	res, err := in.Sandbox.Exec(ctx, backend.ExecRequest{Cmd: []string{g.Config.GDB, "--version"}, Timeout: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("checking for gdb: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("the image has no working %s (exit code %d: %s): use an image with gdb installed, or one that serves MCP itself with command = \"\"",
			g.Config.GDB, res.ExitCode, strings.TrimSpace(string(res.Stdout)+string(res.Stderr)))
	}
	arch := runtime.GOARCH
	if res, err := in.Sandbox.Exec(ctx, backend.ExecRequest{Cmd: []string{"uname", "-m"}, Timeout: 10 * time.Second}); err == nil && res.ExitCode == 0 {
		if a := strings.TrimSpace(string(res.Stdout)); a != "" {
			arch = sbxdbin.NormalizeArch(a)
		}
	}
	bin, err := gdbmcpbin.Find(g.Config.BinaryPath, arch)
	if err != nil {
		return err
	}
	in.Status("injecting gdbmcp")
	if err := sbfiles.WriteFile(ctx, in.Sandbox, gdbmcpInstallPath, bytes.NewReader(bin), 0o755); err != nil {
		return fmt.Errorf("copying gdbmcp into the sandbox: %w", err)
	}
	in.Status("starting gdbmcp")
	argv := []string{gdbmcpInstallPath, "serve", "--detach",
		"--listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(g.Config.Port)),
		"--gdb", g.Config.GDB, "--log", gdbmcpLogPath}
	if g.Config.WorkDir != "" {
		argv = append(argv, "--workdir", g.Config.WorkDir)
	}
	if !g.Config.LoadGDBInit {
		argv = append(argv, "--nx")
	}
	res, err = in.Sandbox.Exec(ctx, backend.ExecRequest{Cmd: argv, Timeout: time.Minute})
	if err != nil {
		return fmt.Errorf("starting gdbmcp: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("starting gdbmcp: exit code %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stdout)+string(res.Stderr)))
	}
	return g.checkServing(ctx, in)
}

// compileDebug runs OpenSage's compile_debug.sh when the sandbox has it,
// restoring /out from /out.bak when it fails.
func (g *GDBMCPInit) compileDebug(ctx context.Context, in *Instance) error {
	script := scriptsDir(in) + compileDebugScript
	if _, err := sbfiles.Stat(ctx, in.Sandbox, script); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			in.Logger.Info("no debug build script: skipped", "script", script)
			return nil
		}
		return fmt.Errorf("looking for %s: %w", script, err)
	}
	_, err := runStep(ctx, in, step{name: "debug build", cmd: []string{"bash", script}, timeout: time.Duration(g.Config.CompileTimeout)})
	if err == nil {
		return nil
	}
	return errors.Join(err, restoreOut(ctx, in))
}

// restoreOut puts /out back from /out.bak after a failed build script
// (which moved it aside), as OpenSage's initializers do.
func restoreOut(ctx context.Context, in *Instance) error {
	// The launch's deadline may be what stopped the build: restore anyway.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fuzzReadTimeout)
	defer cancel()
	restore := fmt.Sprintf(`if [ -e %[1]s.bak ]; then rm -rf %[1]s && mv %[1]s.bak %[1]s; fi`, FuzzOutDir)
	_, err := runStep(rctx, in, step{name: "restoring " + FuzzOutDir + " from " + FuzzOutDir + ".bak",
		cmd: []string{"sh", "-c", restore}, timeout: fuzzReadTimeout})
	return err
}

// servingWait bounds checkServing's wait for an answer on the port.
const servingWait = 10 * time.Second

// checkServing makes sure the program answering on the port is the gdbmcp
// just started, by its /healthz answer: gdbmcp --detach returns once its
// port accepts a connection, which another program holding the port (the
// image's own MCP server) satisfies while gdbmcp itself failed to bind.
// That fails at once, with gdbmcp's log. Without published ports there is
// nothing to ask from here; the readiness probe then decides.
func (g *GDBMCPInit) checkServing(ctx context.Context, in *Instance) error {
	ep, ok := backend.As[backend.Endpointer](in.Sandbox)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, servingWait)
	defer cancel()
	var last error
	for {
		body, status, err := g.healthz(ctx, ep)
		switch {
		case err == nil && status == http.StatusOK && strings.HasPrefix(body, "gdbmcp ok"):
			return nil
		case err == nil:
			return g.notServing(ctx, in, fmt.Sprintf("another program answers on port %d (GET /healthz: status %d, %q)", g.Config.Port, status, snippetOf(body)))
		}
		last = err
		select {
		case <-ctx.Done():
			return g.notServing(ctx, in, fmt.Sprintf("nothing answered GET /healthz on port %d within %s: %v", g.Config.Port, servingWait, last))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// healthz asks the server on the port for /healthz through its published
// address.
func (g *GDBMCPInit) healthz(ctx context.Context, ep backend.Endpointer) (string, int, error) {
	addr, err := ep.Endpoint(ctx, g.Config.Port)
	if err != nil {
		return "", 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return string(b), resp.StatusCode, nil
}

// notServing is the error of a gdbmcp that does not serve its port, with
// the end of its log.
func (g *GDBMCPInit) notServing(ctx context.Context, in *Instance, why string) error {
	msg := fmt.Sprintf("sandboxkit's gdbmcp does not serve port %d: %s", g.Config.Port, why)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if log, err := readSandboxFile(rctx, in.Sandbox, gdbmcpLogPath); err == nil && strings.TrimSpace(log) != "" {
		msg += "; its log " + gdbmcpLogPath + " ends:\n" + lastLines(log, 10)
	}
	return errors.New(msg + "\n(if the image serves MCP itself, run its own command: command = \"\" in the entry, or extra.server = \"image\")")
}

func snippetOf(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}

// Ready: the image's own server answers GET /sse with an event stream (as
// OpenSage checks it), or gdbmcp completes an MCP initialize handshake.
func (g *GDBMCPInit) Ready() wait.Strategy {
	timeout := max(time.Duration(g.Config.InitializerTimeout), time.Minute)
	if g.imageServes {
		return wait.ForSSE(g.Config.Port, GDBMCPSSEPath).WithTimeout(timeout).WithPollInterval(MCPPollInterval)
	}
	return wait.ForMCP(g.Config.Port, GDBMCPPath).WithTimeout(timeout)
}

// Publish exports the MCP server's address. With the image's own server
// (SSE only), GDB_MCP_URL is its SSE endpoint too.
func (g *GDBMCPInit) Publish(host string) map[string]string {
	hp := net.JoinHostPort(host, strconv.Itoa(g.Config.Port))
	url := "http://" + hp + GDBMCPPath
	if g.imageServes {
		url = "http://" + hp + GDBMCPSSEPath
	}
	return map[string]string{
		"GDB_MCP_HOST": host,
		"GDB_MCP_PORT": strconv.Itoa(g.Config.Port),
		"GDB_MCP_URL":  url,
		// OpenSage's gdb_mcp speaks the SSE transport; clients written for
		// it find the same tools here.
		"GDB_MCP_SSE_URL": "http://" + hp + GDBMCPSSEPath,
	}
}

// GDBMCP is the host program's handle on a gdb_mcp sandbox.
type GDBMCP struct {
	// Addr is "host:port" of the MCP server.
	Addr string
	// SSEOnly: the server is the image's own, which serves only the SSE
	// transport (OpenSage's gdb_mcp image).
	SSEOnly bool
}

// URL is the MCP endpoint: streamable HTTP (/mcp) on sandboxkit's gdbmcp,
// the SSE endpoint on a server that serves only that.
func (g *GDBMCP) URL() string {
	if g.SSEOnly {
		return g.SSEURL()
	}
	return "http://" + g.Addr + GDBMCPPath
}

// SSEURL is the SSE MCP endpoint, for clients of OpenSage's gdb_mcp.
func (g *GDBMCP) SSEURL() string { return "http://" + g.Addr + GDBMCPSSEPath }

// Handle returns a *GDBMCP.
func (g *GDBMCPInit) Handle(ctx context.Context, in *Instance) (any, error) {
	addr, err := in.Endpoint(ctx, g.Config.Port)
	if err != nil {
		return nil, err
	}
	return &GDBMCP{Addr: addr, SSEOnly: g.imageServes}, nil
}
