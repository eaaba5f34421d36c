package main

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/server"
)

func (a *app) mcpCmd() *cobra.Command {
	var conversation string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes to one agent over MCP on stdin and stdout",
		Long: `Mcp serves the sandbox tools (create_sandbox, execute, read_file, ...) to the
agent client that started it, over MCP on stdin and stdout, with the rules of
sbx serve (idle TTL, output caps) and the settings of [sandbox.serve].

The process is one conversation. Without --conversation its sandboxes are
removed when the client disconnects; with it they are kept and a later sbx mcp
with the same --conversation (or an HTTP caller of sbx serve sending it as
X-Conversation-Id) reconnects to them.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.mcp(cmd.Context(), conversation)
		},
	}
	cmd.Flags().StringVar(&conversation, "conversation", "", "conversation ID whose sandboxes outlive this process")
	return cmd
}

func (a *app) mcp(ctx context.Context, conversation string) error {
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
	s, b, _, err := a.newServer(ctx, func(o *server.Options) {
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
	if err := s.RunStdio(ctx, conv, server.StdioTransport(a.stdin, a.stdout)); err != nil {
		return err
	}
	return s.Close()
}
