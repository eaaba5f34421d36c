package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/internal/cli/serveapi"
)

const serveShort = "Serve sandboxes to agents over MCP (streamable HTTP) and a JSON API"

func (a *app) serveCmd() *cobra.Command {
	srv := features.Server
	if srv == nil {
		return fullsCommand("serve", serveShort)
	}
	var listen string
	var insecure, allowUnisolated bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: serveShort,
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

` + srv.LimitsHelp + `

On SIGINT or SIGTERM calls in flight get a few seconds to finish; sandboxes
are kept (a restarted serve adopts them) unless delete_on_shutdown is set.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return srv.Serve(cmd.Context(), a.serveEnv(), listen, insecure, allowUnisolated)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "address to listen on (default [sandbox.serve] listen, else "+srv.DefaultListen+")")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow listening on a non-loopback address without an API key")
	cmd.Flags().BoolVar(&allowUnisolated, strings.TrimPrefix(srv.FlagAllowUnisolated, "--"), false,
		"allow listening on a non-loopback address with a backend without isolation (local), which lets callers run commands on this host")
	return cmd
}

// serveEnv is what serve and mcp get of the app.
func (a *app) serveEnv() serveapi.Env {
	return serveapi.Env{Open: a.open, Logger: a.logger, Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr}
}
