package initializers

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
	"github.com/sandboxkit/sandboxkit/internal/gdbmcpbin"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// GDBMCPType is gdb behind an MCP server (cmd/gdbmcp), injected into any
// image that has gdb.
const GDBMCPType = "gdb_mcp"

// DefaultGDBMCPPort is the MCP server's port inside the sandbox.
const DefaultGDBMCPPort = 1111

// GDBMCPPath is the MCP endpoint's path on the server (streamable HTTP;
// /sse serves the older SSE transport).
const GDBMCPPath = "/mcp"

// GDBMCPSSEPath is the gdb MCP server's SSE endpoint (the transport
// OpenSage's gdb_mcp image serves).
const GDBMCPSSEPath = "/sse"

// Where the injected server and its log go inside the sandbox.
const (
	gdbmcpInstallPath = "/opt/sandboxkit/gdbmcp"
	gdbmcpLogPath     = "/tmp/sandboxkit-gdbmcp.log"
)

// GDBMCPConfig is [sandbox.sandboxes.gdb_mcp.extra].
type GDBMCPConfig struct {
	Common
	// Port the MCP server listens on inside the sandbox. Default 1111.
	Port int `toml:"port"`
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
}

// GDBMCPFactory is the gdb_mcp initializer.
func GDBMCPFactory() Factory {
	return Factory{
		NewConfig: func() any { return &GDBMCPConfig{Port: DefaultGDBMCPPort, GDB: "gdb", LoadGDBInit: true} },
		New: func(cfg any) (Initializer, error) {
			c := cfg.(*GDBMCPConfig)
			if c.Port < 1 || c.Port > 65535 {
				return nil, invalidf("port %d: want 1-65535", c.Port)
			}
			if strings.TrimSpace(c.GDB) == "" {
				return nil, invalidf(`gdb: empty (default "gdb")`)
			}
			if c.BinaryPath != "" {
				if _, err := os.Stat(c.BinaryPath); err != nil {
					return nil, invalidf("binary_path: %v", err)
				}
			}
			return &GDBMCPInit{Config: *c}, nil
		},
	}
}

// GDBMCPInit is the gdb_mcp initializer for one entry.
type GDBMCPInit struct {
	Generic
	Config GDBMCPConfig
}

// Spec publishes the MCP port; the image is the entry's (it needs gdb).
func (g *GDBMCPInit) Spec() backend.Spec {
	return backend.Spec{Ports: []backend.Port{{Port: g.Config.Port, Protocol: "tcp"}}}
}

// Provision copies the gdbmcp server into the sandbox and starts it in
// the background; it returns once the server listens.
func (g *GDBMCPInit) Provision(ctx context.Context, in *Instance) error {
	res, err := in.Sandbox.Exec(ctx, backend.ExecRequest{Cmd: []string{g.Config.GDB, "--version"}, Timeout: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("checking for gdb: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("the image has no working %s (exit code %d: %s): use an image with gdb installed",
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
	if err := backend.WriteFile(ctx, in.Sandbox, gdbmcpInstallPath, bytes.NewReader(bin), 0o755); err != nil {
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
	return nil
}

// Ready: an MCP initialize handshake succeeds.
func (g *GDBMCPInit) Ready() wait.Strategy {
	return wait.ForMCP(g.Config.Port, GDBMCPPath).WithTimeout(max(time.Duration(g.Config.InitializerTimeout), time.Minute))
}

// Publish exports the MCP server's address.
func (g *GDBMCPInit) Publish(host string) map[string]string {
	hp := net.JoinHostPort(host, strconv.Itoa(g.Config.Port))
	return map[string]string{
		"GDB_MCP_HOST": host,
		"GDB_MCP_PORT": strconv.Itoa(g.Config.Port),
		"GDB_MCP_URL":  "http://" + hp + GDBMCPPath,
		// OpenSage's gdb_mcp speaks the SSE transport; clients written for
		// it find the same tools here.
		"GDB_MCP_SSE_URL": "http://" + hp + GDBMCPSSEPath,
	}
}

// GDBMCP is the host program's handle on a gdb_mcp sandbox.
type GDBMCP struct {
	// Addr is "host:port" of the MCP server.
	Addr string
}

// URL is the streamable HTTP MCP endpoint.
func (g *GDBMCP) URL() string { return "http://" + g.Addr + GDBMCPPath }

// SSEURL is the SSE MCP endpoint, for clients of OpenSage's gdb_mcp.
func (g *GDBMCP) SSEURL() string { return "http://" + g.Addr + GDBMCPSSEPath }

// Handle returns a *GDBMCP.
func (g *GDBMCPInit) Handle(ctx context.Context, in *Instance) (any, error) {
	addr, err := in.Endpoint(ctx, g.Config.Port)
	if err != nil {
		return nil, err
	}
	return &GDBMCP{Addr: addr}, nil
}
