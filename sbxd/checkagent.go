package sbxd

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
)

// CheckAgent reports whether conn (from a backend.AgentDialer) leads to an
// sbxd agent that serves sandbox id, through the handshake a Client makes
// on a dialled agent. Backend test suites use it with
// backendtest.WithAgentCheck.
func CheckAgent(ctx context.Context, id string, conn net.Conn) error {
	c, err := Wrap(ctx, &dialledConn{id: id, conn: conn}, WithDialOnly())
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.Agent(ctx)
	if err != nil {
		return err
	}
	if !info.Dialled || info.Version == "" {
		return errors.New("sbxd's client did not use the dialled connection")
	}
	return nil
}

// dialledConn is a sandbox that offers nothing but one connection to an
// agent, through DialAgent.
type dialledConn struct {
	id    string
	conn  net.Conn
	taken sync.Once
}

func (d *dialledConn) DialAgent(context.Context) (net.Conn, error) {
	conn := net.Conn(nil)
	d.taken.Do(func() { conn = d.conn })
	if conn == nil {
		return nil, errors.New("the connection was dialled already")
	}
	return conn, nil
}

func (d *dialledConn) ID() string { return d.id }
func (d *dialledConn) Info(context.Context) (backend.Info, error) {
	return backend.Info{}, errors.ErrUnsupported
}
func (d *dialledConn) Exec(context.Context, backend.ExecRequest) (backend.ExecResult, error) {
	return backend.ExecResult{}, errors.ErrUnsupported
}
func (d *dialledConn) Destroy(context.Context) error { return nil }
