package sbxd

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// Terminal starts req on a pseudo-terminal the agent opens (see
// backend.Terminaler). Without an agent, or for another user when the
// agent is not root, it takes the wrapped sandbox's terminal where it has
// one.
func (c *Client) Terminal(ctx context.Context, req backend.TerminalRequest) (backend.Terminal, error) {
	if err := req.Check(); err != nil {
		return nil, c.opErr("terminal", err)
	}
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil || !c.userByAgent(conn, req.User) {
		if t, ok := backend.As[backend.Terminaler](c.sb); ok {
			return t.Terminal(ctx, req)
		}
		return nil, c.opErr("terminal", fmt.Errorf("%w: no sbxd agent in the sandbox and no terminal of its own", errors.ErrUnsupported))
	}
	if req.ID == "" {
		req.ID = newID()
	}
	wr := sbxdwire.TerminalRequest{ID: req.ID, Argv: req.Cmd, Env: req.Env, Dir: req.WorkDir, User: req.User,
		Rows: req.Size.Rows, Cols: req.Size.Cols}
	return c.openTerminal(ctx, conn, sbxdwire.RouteTerminal, wr)
}

// AttachTerminal attaches to terminal id of the agent again.
func (c *Client) AttachTerminal(ctx context.Context, id string, size backend.TermSize) (backend.Terminal, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, c.opErr("terminal", backend.ErrNotDetachable)
	}
	wr := sbxdwire.TerminalRequest{ID: id, Rows: size.Rows, Cols: size.Cols}
	return c.openTerminal(ctx, conn, sbxdwire.RouteTerminal+"/"+url.PathEscape(id)+"/attach", wr)
}

// Detachable: a terminal lives as long as the agent does. The agent a
// sandbox starts with itself (lite; native and remotedocker as root)
// outlives every client; one this client started ends with it.
func (c *Client) Detachable() bool { return true }

// Terminals lists the agent's terminals.
func (c *Client) Terminals(ctx context.Context) ([]backend.TerminalInfo, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, nil
	}
	var list []TerminalStatus
	if err := conn.getJSON(ctx, sbxdwire.RouteTerminal, &list); err != nil {
		return nil, c.opErr("terminal", err)
	}
	out := make([]backend.TerminalInfo, len(list))
	for i, t := range list {
		out[i] = backend.TerminalInfo{ID: t.ID, Cmd: t.Argv, Running: t.Running, ExitCode: t.ExitCode,
			Attached: t.Attached, Started: t.Started, Size: backend.TermSize{Rows: t.Rows, Cols: t.Cols}}
	}
	return out, nil
}

// openTerminal sends a start or attach request whose body is the input
// and whose answer is the output. The exchange outlives ctx (which bounds
// only the request's start): Close or Kill ends it.
func (c *Client) openTerminal(ctx context.Context, conn *agentConn, route string, wr sbxdwire.TerminalRequest) (backend.Terminal, error) {
	hdr, _ := json.Marshal(wr)
	in, inW := io.Pipe()
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	hreq, err := http.NewRequestWithContext(lctx, http.MethodPost, agentURL+route, in)
	if err != nil {
		cancel()
		return nil, c.opErr("terminal", err)
	}
	hreq.Header.Set(sbxdwire.HdrTerminal, string(hdr))
	hreq.Close = true // the stream is this terminal's alone
	stop := context.AfterFunc(ctx, cancel)
	resp, err := conn.do(hreq)
	stopped := stop()
	if err != nil || !stopped {
		cancel()
		inW.Close()
		if err == nil {
			resp.Body.Close()
			err = ctx.Err()
		}
		return nil, c.opErr("terminal", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		cancel()
		inW.Close()
		err := responseError(resp)
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: terminal %q (%v)", backend.ErrNotFound, wr.ID, err)
		}
		return nil, c.opErr("terminal", err)
	}
	return &agentTerminal{c: c, conn: conn, id: wr.ID, resp: resp, in: inW, cancel: cancel}, nil
}

// agentTerminal is one client's attachment to a terminal of the agent.
type agentTerminal struct {
	c      *Client
	conn   *agentConn
	id     string
	resp   *http.Response
	in     *io.PipeWriter
	cancel context.CancelFunc

	rmu  sync.Mutex
	left uint32 // bytes of the current frame not read yet
	hdr  [sbxdwire.FrameHdrLen]byte

	mu     sync.Mutex
	code   int
	exited bool
}

func (t *agentTerminal) ID() string { return t.id }

func (t *agentTerminal) Read(p []byte) (int, error) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	for t.left == 0 {
		if _, err := io.ReadFull(t.resp.Body, t.hdr[:]); err != nil {
			if err == io.EOF {
				return 0, t.ended()
			}
			return 0, t.lost(err)
		}
		n := binary.BigEndian.Uint32(t.hdr[4:])
		if t.hdr[0] != sbxdwire.FrameStdout || t.hdr[1]|t.hdr[2]|t.hdr[3] != 0 || n > sbxdwire.MaxFrameBytes {
			return 0, t.lost(sbxdwire.ErrBadFrame)
		}
		t.left = n
	}
	n, err := t.resp.Body.Read(p[:min(len(p), int(t.left))])
	t.left -= uint32(n)
	if err == io.EOF {
		if t.left > 0 {
			return n, t.lost(io.ErrUnexpectedEOF)
		}
		err = nil
	}
	if err != nil {
		err = t.lost(err)
	}
	return n, err
}

// ended reads the exit status the answer's trailer carries.
func (t *agentTerminal) ended() error {
	var r sbxdwire.ExecResult
	if err := json.Unmarshal([]byte(t.resp.Trailer.Get(sbxdwire.HdrResult)), &r); err != nil {
		return t.lost(errors.New("the agent sent no exit status"))
	}
	t.mu.Lock()
	t.code, t.exited = r.ExitCode, true
	t.mu.Unlock()
	return io.EOF
}

func (t *agentTerminal) lost(err error) error {
	return t.c.opErr("terminal", t.conn.transportErr(context.Background(), err))
}

func (t *agentTerminal) Write(p []byte) (int, error) {
	n, err := t.in.Write(p)
	if err != nil {
		return n, t.c.opErr("terminal", err)
	}
	return n, nil
}

func (t *agentTerminal) Resize(ctx context.Context, size backend.TermSize) error {
	err := t.conn.postJSON(ctx, sbxdwire.RouteTerminal+"/"+url.PathEscape(t.id)+"/resize", sbxdwire.ResizeRequest{Rows: size.Rows, Cols: size.Cols}, nil)
	if err != nil {
		return t.c.opErr("terminal", err)
	}
	return nil
}

func (t *agentTerminal) ExitCode() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.code, t.exited
}

func (t *agentTerminal) Kill(ctx context.Context) error {
	if err := t.conn.postJSON(ctx, sbxdwire.RouteTerminal+"/"+url.PathEscape(t.id)+"/kill", struct{}{}, nil); err != nil {
		return t.c.opErr("terminal", err)
	}
	return nil
}

// Close detaches: the answer is dropped, and the agent sees its client
// go; the program keeps running.
func (t *agentTerminal) Close() error {
	t.cancel()
	t.in.Close()
	return t.resp.Body.Close()
}
