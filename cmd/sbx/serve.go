package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
)

func (a *app) serveCmd() *cobra.Command {
	var listen string
	var insecure, allowUnisolated bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve sandboxes to agents over MCP (streamable HTTP) and a JSON API",
		Long: `Serve gives agents sandboxes on the config's backend: MCP over streamable
HTTP at /mcp, the same tools as JSON endpoints at /tools/NAME, /health,
/sandbox/status and /pools. Settings are in [sandbox.serve] (see
config.example.toml).

It also serves OpenSandbox's lifecycle API (/v1/sandboxes...) and, per
sandbox, its execd API, so OpenSandbox's SDKs work against this backend: point
their domain at serve's address and their API key at $SBX_API_KEY (sent as
OPEN-SANDBOX-API-KEY). Sandboxes are made from the first entry with the
request's image, entrypoint, environment and limits.

An entry with a [sandbox.sandboxes.NAME.pool] table gets a warm pool while
serve runs: size ready sandboxes (provisioned, their agent connected), one
of which create_sandbox hands out in milliseconds; the pool refills behind
it. GET /pools shows the figures. The ready sandboxes are removed when serve
stops.

Each sandbox belongs to the conversation that made it (the MCP session, or the
X-Conversation-Id header) and is removed after its idle TTL without tool calls
or at max_lifetime. The API key is $SBX_API_KEY, else [sandbox.serve] api_key;
without one, serve listens only on loopback unless --insecure is given.

On a backend without isolation (local: commands run as host processes) serve
warns at start and listens only on loopback unless --allow-unisolated is
given, key or not: whoever reaches it could run commands on this host. File
tools are confined to each sandbox's folder there; commands are not.

` + serveLimitsHelp + `

On SIGINT or SIGTERM calls in flight get a few seconds to finish; sandboxes
are kept (a restarted serve adopts them) unless delete_on_shutdown is set.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.serve(cmd.Context(), listen, insecure, allowUnisolated)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "address to listen on (default [sandbox.serve] listen, else "+server.DefaultListen+")")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow listening on a non-loopback address without an API key")
	cmd.Flags().BoolVar(&allowUnisolated, strings.TrimPrefix(server.FlagAllowUnisolated, "--"), false,
		"allow listening on a non-loopback address with a backend without isolation (local), which lets callers run commands on this host")
	return cmd
}

// serveLimitsHelp is serve's help on its limits (server.Options.MaxConns
// and below).
var serveLimitsHelp = fmt.Sprintf(`Callers without the key, and floods, cannot starve the others: a request's
body is read only after its key is checked (a refused request's connection is
closed unread), bodies must arrive within %s plus 1 s per %d KiB (else 408),
at most %d MiB of bodies are held at once (else 503 with Retry-After after a
%s wait), and serve holds at most %d connections (or half the process's
file descriptor limit), a quarter of them from one address: past a cap, a
connection that has sent no request for a second is closed to make room,
else the new one is answered 503 (429 for one address) and closed. Headers
must arrive within %s; idle connections close after %s. Answers, MCP
event streams and terminals are not timed.`,
	server.DefaultBodyTimeout, server.DefaultBodyMinRate>>10, server.DefaultBodyBudget>>20, server.DefaultBodyWait,
	server.DefaultMaxConns, server.DefaultReadHeaderTimeout, server.DefaultIdleTimeout)

// newServer opens the config's backend and makes a server over it. The
// caller closes both.
func (a *app) newServer(ctx context.Context, edit func(*server.Options)) (*server.Server, backend.Backend, string, error) {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	opts, warnings, err := server.ConfigOptions(cfg)
	for _, w := range warnings {
		fmt.Fprintf(a.stderr, "warning: %s\n", w)
	}
	if err != nil {
		b.Close()
		return nil, nil, "", err
	}
	if w := server.UnisolatedWarning(b); w != "" {
		fmt.Fprintf(a.stderr, "warning: %s\n", w)
	}
	opts.Backend, opts.Logger = b, a.logger
	if edit != nil {
		edit(&opts)
	}
	s, err := server.New(opts)
	if err != nil {
		b.Close()
		return nil, nil, "", err
	}
	return s, b, cmp.Or(cfg.Sandbox.Serve.Listen, server.DefaultListen), nil
}

func (a *app) serve(ctx context.Context, listen string, insecure, allowUnisolated bool) error {
	var hasKey bool
	s, b, cfgListen, err := a.newServer(ctx, func(o *server.Options) { hasKey = o.APIKey != "" })
	if err != nil {
		return err
	}
	defer b.Close()
	defer s.Close()
	listen = cmp.Or(listen, cfgListen)
	if err := server.CheckListen(listen, hasKey, insecure); err != nil {
		return err
	}
	if err := server.CheckUnisolatedListen(listen, b, allowUnisolated); err != nil {
		return err
	}
	// An unreachable backend does not stop the server: /sandbox/status
	// reports it, and calls work once the backend is back.
	if n, err := s.Adopt(ctx, ""); err != nil {
		fmt.Fprintf(a.stderr, "warning: %v\n", err)
	} else if n > 0 {
		a.logger.Info("adopted sandboxes from an earlier run", "count", n)
	}
	for _, p := range s.PoolStats() {
		fmt.Fprintf(a.stderr, "sbx serve: keeping a pool of %d ready sandboxes of entry %s (pool %s)\n", p.Size, p.Entry, p.Pool)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "sbx serve: listening on http://%s (MCP at /mcp, backend %s)\n", ln.Addr(), b.Name())
	if err := s.Serve(ctx, ln); err != nil {
		return err
	}
	return s.Close()
}
