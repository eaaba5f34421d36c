package cli

import (
	"github.com/spf13/cobra"
)

const mcpShort = "Serve sandboxes to one agent over MCP on stdin and stdout"

func (a *app) mcpCmd() *cobra.Command {
	srv := features.Server
	if srv == nil {
		return fullsCommand("mcp", mcpShort)
	}
	var conversation string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: mcpShort,
		Long: `Mcp serves the sandbox tools (create_sandbox, execute, read_file, ...) to the
agent client that started it, over MCP on stdin and stdout, with the rules of
sbx serve (idle TTL, output caps) and the settings of [sandbox.serve].

The process is one conversation. Without --conversation its sandboxes are
removed when the client disconnects; with it they are kept and a later sbx mcp
with the same --conversation (or an HTTP caller of sbx serve sending it as
X-Conversation-Id) reconnects to them.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return srv.MCP(cmd.Context(), a.serveEnv(), conversation)
		},
	}
	cmd.Flags().StringVar(&conversation, "conversation", "", "conversation ID whose sandboxes outlive this process")
	return cmd
}
