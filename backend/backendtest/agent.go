package backendtest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// testAgentDialer dials the sandbox's agent twice at once and checks that
// it answers on both connections (with WithAgentCheck's function).
func testAgentDialer(check func(context.Context, string, net.Conn) error) func(*testing.T, backend.Sandbox) {
	return func(t *testing.T, sb backend.Sandbox) {
		d, ok := backend.As[backend.AgentDialer](sb)
		if !ok {
			t.Skip("the sandbox is not an AgentDialer")
		}
		ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
		defer cancel()
		first, err := d.DialAgent(ctx)
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skipf("DialAgent: %v (the interface's way of saying this sandbox has no agent of its own)", err)
		}
		if err != nil {
			t.Fatalf("DialAgent: %v", err)
		}
		defer first.Close()
		second, err := d.DialAgent(ctx)
		if err != nil {
			t.Fatalf("a second DialAgent while the first connection is open: %v", err)
		}
		defer second.Close()
		if check == nil {
			t.Fatal("the sandbox is an AgentDialer, but Run has no WithAgentCheck to tell whether its agent answers")
		}
		errs := make(chan error, 2)
		for _, conn := range []net.Conn{first, second} {
			go func() { errs <- check(ctx, sb.ID(), conn) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("the agent on a DialAgent connection: %v", err)
			}
		}
	}
}
