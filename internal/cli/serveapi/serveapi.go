// Package serveapi is what the CLI (internal/cli) and the commands that
// serve sandboxes (internal/servecmd: sbx serve, sbx mcp) share, so that
// sbx, which does not link the server, needs neither it nor its libraries
// (Prometheus' client, the MCP SDK) to build those commands' places: it
// hands them over to sbx-full, which links both.
package serveapi

import (
	"context"
	"io"
	"log/slog"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
)

// Env is what a command of the CLI gives the server's commands.
type Env struct {
	// Open loads the config (--config, --backend) and opens its backend;
	// the caller closes the backend.
	Open   func(ctx context.Context) (*config.Config, backend.Backend, error)
	Logger *slog.Logger
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Server is the server's side of sbx serve and sbx mcp.
type Server struct {
	// Serve serves sandboxes on listen ("": the config's, else
	// DefaultListen) until ctx ends.
	Serve func(ctx context.Context, env Env, listen string, insecure, allowUnisolated bool) error
	// MCP serves one conversation over MCP on env's stdin and stdout
	// ("": one no later process can resume).
	MCP func(ctx context.Context, env Env, conversation string) error
	// DefaultListen, FlagAllowUnisolated and LimitsHelp go into serve's
	// flags and help.
	DefaultListen       string
	FlagAllowUnisolated string
	LimitsHelp          string
}
