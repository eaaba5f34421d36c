package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/fileops"
)

// Implementation is how the server names itself to MCP clients.
var Implementation = &mcp.Implementation{Name: "sandboxkit", Title: "sandboxkit sandboxes", Version: "0.1.0"}

// sessionedVersions are the MCP protocol versions the server speaks: those
// with sessions, since a conversation is an MCP session (protocol
// 2026-07-28 has none; its clients fall back to an older version).
var sessionedVersions = slices.DeleteFunc(mcp.SupportedProtocolVersions(), func(v string) bool { return v >= "2026-07-28" })

// mcpRegistrar adds tools to an MCP server.
type mcpRegistrar struct {
	srv  *mcp.Server
	s    *Server
	conv func(*mcp.CallToolRequest) string
}

// MCPServer returns an MCP server with every tool. conv names the
// conversation a call belongs to; nil means the MCP session ("mcp:ID"),
// as over streamable HTTP.
func (s *Server) MCPServer(conv func(*mcp.CallToolRequest) string) *mcp.Server {
	if conv == nil {
		conv = func(req *mcp.CallToolRequest) string {
			if req.Session == nil || req.Session.ID() == "" {
				return ""
			}
			return "mcp:" + req.Session.ID()
		}
	}
	srv := mcp.NewServer(Implementation, &mcp.ServerOptions{
		Instructions:              s.instructions(),
		Logger:                    s.opts.Logger,
		SupportedProtocolVersions: sessionedVersions,
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	r := &mcpRegistrar{srv: srv, s: s, conv: conv}
	for _, t := range tools() {
		t.register(r)
	}
	return srv
}

// RunStdio serves MCP on stdin and stdout until the client disconnects or
// ctx ends; every call belongs to conversation conv.
func (s *Server) RunStdio(ctx context.Context, conv string, t mcp.Transport) error {
	srv := s.MCPServer(func(*mcp.CallToolRequest) string { return conv })
	err := srv.Run(ctx, t)
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// defineTool makes a toolDef from a typed handler.
func defineTool[In any](name, description string, fn func(context.Context, *Server, string, In) (Result, error)) toolDef {
	return toolDef{
		name: name, description: description,
		register: func(r *mcpRegistrar) {
			mcp.AddTool(r.srv, &mcp.Tool{Name: name, Description: r.s.describe(name, description)},
				func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
					res := runTool(ctx, r.s, name, r.conv(req), in, fn)
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Output}}, IsError: res.IsError}, nil, nil
				})
		},
		http: func(ctx context.Context, s *Server, conv string, body []byte) (Result, error) {
			var in In
			if len(bytes.TrimSpace(body)) > 0 {
				if err := decodeArgs(body, &in); err != nil {
					return Result{}, &httpError{code: http.StatusBadRequest, msg: fmt.Sprintf("tool %s: bad JSON arguments: %v", name, err)}
				}
			}
			return runTool(ctx, s, name, conv, in, fn), nil
		},
		schema: func() (any, error) { return jsonschema.For[In](nil) },
	}
}

// runTool runs a call of tool name with input in for conversation conv,
// however it came (MCP, HTTP), and accounts for it: one entry of the
// audit trail, the tool metrics.
func runTool[In any](ctx context.Context, s *Server, name, conv string, in In, fn func(context.Context, *Server, string, In) (Result, error)) Result {
	start := time.Now()
	e := toolAuditEntry(name, conv, in)
	res, err := fn(withAudit(withTool(ctx, name), e), s, conv, in)
	res = s.finish(name, res, err)
	e.Sandbox = cmp.Or(e.Sandbox, res.SandboxID)
	e.IsError = res.IsError
	s.record(e, start)
	s.metrics.toolCalls.WithLabelValues(name, outcome(res.IsError)).Inc()
	s.metrics.toolTime.WithLabelValues(name).Observe(time.Since(start).Seconds())
	return res
}

// finish turns a tool's outcome into what the agent reads: a ToolError's
// text, or "Error: ..." for a failure of the server or backend (logged).
func (s *Server) finish(tool string, res Result, err error) Result {
	if err == nil {
		return res
	}
	res.IsError = true
	if oe, ok := errors.AsType[*OutsideError](err); ok {
		res.Output = oe.agentText()
		return res
	}
	if te, ok := errors.AsType[*fileops.ToolError](err); ok {
		res.Output = te.Error()
		return res
	}
	s.opts.Logger.Warn("tool call failed", "tool", tool, "err", err)
	res.Output = "Error: " + err.Error()
	return res
}
