// Package servecmd is sbx serve's and sbx mcp's work over package server:
// sbx-full links it (see serveapi), sbx hands those commands over.
package servecmd

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"net"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/cli/serveapi"
	"github.com/sandboxkit/sandboxkit/server"
)

// Server is the server's side of the CLI's commands.
func Server() *serveapi.Server {
	return &serveapi.Server{
		Serve:               serve,
		MCP:                 mcp,
		DefaultListen:       server.DefaultListen,
		FlagAllowUnisolated: server.FlagAllowUnisolated,
		LimitsHelp:          limitsHelp,
	}
}

// limitsHelp is serve's help on its limits (server.Options.MaxConns and
// below).
var limitsHelp = fmt.Sprintf(`Callers without the key, and floods, cannot starve the others: a request's
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
func newServer(ctx context.Context, env serveapi.Env, edit func(*server.Options)) (*server.Server, backend.Backend, string, error) {
	cfg, b, err := env.Open(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	opts, warnings, err := server.ConfigOptions(cfg)
	for _, w := range warnings {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	if err != nil {
		b.Close()
		return nil, nil, "", err
	}
	if w := server.UnisolatedWarning(b); w != "" {
		fmt.Fprintf(env.Stderr, "warning: %s\n", w)
	}
	opts.Backend, opts.Logger = b, env.Logger
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

func serve(ctx context.Context, env serveapi.Env, listen string, insecure, allowUnisolated bool) error {
	var hasKey bool
	s, b, cfgListen, err := newServer(ctx, env, func(o *server.Options) { hasKey = o.APIKey != "" })
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
		fmt.Fprintf(env.Stderr, "warning: %v\n", err)
	} else if n > 0 {
		env.Logger.Info("adopted sandboxes from an earlier run", "count", n)
	}
	for _, p := range s.PoolStats() {
		fmt.Fprintf(env.Stderr, "sbx serve: keeping a pool of %d ready sandboxes of entry %s (pool %s)\n", p.Size, p.Entry, p.Pool)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "sbx serve: listening on http://%s (MCP at /mcp, backend %s)\n", ln.Addr(), b.Name())
	if err := s.Serve(ctx, ln); err != nil {
		return err
	}
	return s.Close()
}

func mcp(ctx context.Context, env serveapi.Env, conversation string) error {
	var conv string
	if conversation != "" {
		h := make(map[string][]string)
		h[server.HeaderConversation] = []string{conversation}
		var err error
		if conv, err = server.ConversationFromHeader(h); err != nil {
			return fmt.Errorf("--conversation: %w", err)
		}
	} else {
		conv = "stdio:" + rand.Text()
	}
	s, b, _, err := newServer(ctx, env, func(o *server.Options) {
		// A conversation nobody can name again cannot resume its sandboxes.
		o.DeleteOnShutdown = o.DeleteOnShutdown || conversation == ""
	})
	if err != nil {
		return err
	}
	defer b.Close()
	defer s.Close()
	if conversation != "" {
		if _, err := s.Adopt(ctx, conv); err != nil {
			return err
		}
	}
	if err := s.RunStdio(ctx, conv, server.StdioTransport(env.Stdin, env.Stdout)); err != nil {
		return err
	}
	return s.Close()
}
