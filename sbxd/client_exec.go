package sbxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// opErr wraps err for op as the wrapped sandbox's backend would, naming
// sbxd.
func (c *Client) opErr(op string, err error) error {
	return backend.WrapOp(op, "sbxd", c.sb.ID(), err)
}

// userByAgent reports whether the agent runs a command as user ("" is the
// sandbox's own): only as root, and only when the wrapped backend's
// Capabilities offer users (WrapBackend records them). Otherwise the
// wrapped sandbox's own Exec decides, refusing what its backend cannot do,
// so that a sandbox behaves the same with the agent as without.
func (c *Client) userByAgent(conn *agentConn, user string) bool {
	return user == "" || (conn.hello.UID == 0 && !c.opts.noUsers)
}

// Exec runs req through the agent with the semantics of backend.Sandbox:
// streaming output, stdin, a timeout that kills the process tree (exit 124)
// and cancellation that kills it too. A request the agent cannot serve (a
// User while the agent is not root) and every request after the agent
// could not start take the wrapped sandbox's Exec.
func (c *Client) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	argv, err := req.Argv()
	if err != nil {
		return backend.ExecResult{}, c.opErr("exec", err)
	}
	conn, err := c.agent(ctx)
	if err != nil {
		return backend.ExecResult{}, err
	}
	if conn == nil || !c.userByAgent(conn, req.User) {
		return c.sb.Exec(ctx, req)
	}
	start := time.Now()
	wr := sbxdwire.ExecRequest{ID: newID(), Argv: argv, Env: req.Env, Dir: req.WorkDir, User: req.User, Stdin: req.Stdin != nil}
	if req.Timeout > 0 {
		wr.TimeoutMS = max(req.Timeout.Milliseconds(), 1)
	}
	if limit := req.Limit(); limit > 0 {
		// Only what the client keeps crosses the stream; the agent
		// drains the rest.
		if req.Stdout == nil {
			wr.StdoutLimit = limit
		}
		if req.Stderr == nil {
			wr.StderrLimit = limit
		}
	}
	hdr, _ := json.Marshal(wr)
	var body io.Reader
	if req.Stdin != nil {
		// Hidden behind a plain Reader: the request is chunked and the
		// transport does not close the caller's reader.
		body = struct{ io.Reader }{req.Stdin}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, agentURL+sbxdwire.RouteExec, body)
	if err != nil {
		return backend.ExecResult{}, c.opErr("exec", err)
	}
	hreq.Header.Set(sbxdwire.HdrExec, string(hdr))
	// The agent may answer before it has read all of stdin (a command
	// that exits without reading it); such a stream is not reusable.
	hreq.Close = req.Stdin != nil
	resp, err := conn.do(hreq)
	if err != nil {
		return c.execFailed(ctx, conn, wr.ID, backend.ExecResult{ExitCode: -1}, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return backend.ExecResult{}, c.opErr("exec", responseError(resp))
	}
	out := backend.NewOutputs(req)
	derr := sbxdwire.Demux(resp.Body, out.Stdout, out.Stderr)
	res := backend.ExecResult{ExitCode: -1, Duration: time.Since(start)}
	out.Finish(&res)
	if derr != nil {
		return c.execFailed(ctx, conn, wr.ID, res, conn.transportErr(ctx, derr))
	}
	var r sbxdwire.ExecResult
	if err := json.Unmarshal([]byte(resp.Trailer.Get(sbxdwire.HdrResult)), &r); err != nil {
		return c.execFailed(ctx, conn, wr.ID, res, conn.transportErr(ctx, fmt.Errorf("the agent sent no exit status: %w", err)))
	}
	if r.Error != "" {
		if ctx.Err() != nil {
			// The agent saw the cancel first.
			return res, c.opErr("exec", ctx.Err())
		}
		return res, c.opErr("exec", errors.New(r.Error))
	}
	res.ExitCode, res.TimedOut = r.ExitCode, r.TimedOut
	res.Truncated = res.Truncated || r.Truncated
	return res, nil
}

// execFailed ends an exec that could not finish normally: after a cancel
// the agent is told to kill the command before Exec returns; after a lost
// connection the agent is forgotten so the next call starts a new one.
func (c *Client) execFailed(ctx context.Context, conn *agentConn, id string, res backend.ExecResult, err error) (backend.ExecResult, error) {
	res.ExitCode = -1
	if errors.Is(err, ErrAgentLost) {
		c.forget(conn)
		return res, c.opErr("exec", err)
	}
	// Nothing reads the command's output any more: end it.
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if kerr := conn.postJSON(kctx, sbxdwire.RouteKill, sbxdwire.KillRequest{ID: id}, nil); kerr != nil {
		c.opts.log.Warn("sbxd: killing a command failed", "sandbox", c.sb.ID(), "err", kerr)
	}
	if ctx.Err() != nil {
		return res, c.opErr("exec", ctx.Err())
	}
	return res, c.opErr("exec", err)
}
