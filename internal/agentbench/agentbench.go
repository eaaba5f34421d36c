// Package agentbench measures a command through a sandbox's own agent
// (sbxd, reached by its local socket) against the floor the project
// promises it stays near: a host process spawning the same program plus
// one round trip on a local socket, alternating in the same run. The
// backends' benchmarks call it; the performance gate reads what it
// reports (agent-p50-ms, agent-p90-ms, spawn-p50-ms, spawn-p90-ms).
package agentbench

import (
	"context"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// ExecAgainstSpawn runs `true` in sb through its agent and `true` on the
// host (plus a one-byte round trip on a unix socket) once per b.Loop
// iteration each, and reports both sides' p50 and p90 in milliseconds.
// sb must have an agent of its own (backend.AgentDialer that answers):
// the figure is the agent's, never a fallback's.
func ExecAgainstSpawn(b *testing.B, sb backend.Sandbox) {
	ctx := context.Background()
	if _, ok := backend.As[backend.AgentDialer](sb); !ok {
		b.Fatalf("sandbox %s has no agent to dial (backend.AgentDialer)", sb.ID())
	}
	c, err := sbxd.Wrap(ctx, sb, sbxd.WithDialOnly())
	if err != nil {
		b.Fatalf("dialing the agent of %s: %v", sb.ID(), err)
	}
	defer c.Close()
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	echo := echoServer(b)
	conn, err := net.Dial("unix", echo)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	one := []byte{1}
	run := func() error {
		res, err := c.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}})
		if err == nil && res.ExitCode != 0 {
			b.Fatalf("true exited %d in the sandbox: %s", res.ExitCode, res.Stderr)
		}
		return err
	}
	// Unmeasured commands first, for settle: the first exec pays the
	// agent's connection, and a gVisor sandbox's commands cost 1-2 ms
	// more in its first second or two (both gVisors here, after a 2 s
	// wait as after 2 s of commands; runc's do not), which the cold and
	// pooled time to first command measure. This figure is a sandbox in
	// use. One unmeasured spawn pays the page cache.
	for start := time.Now(); ; {
		if err := run(); err != nil {
			b.Fatal(err)
		}
		if time.Since(start) >= settle {
			break
		}
	}
	if err := exec.Command(truePath).Run(); err != nil {
		b.Fatal(err)
	}
	var agent, spawn []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := run(); err != nil {
			b.Fatal(err)
		}
		agent = append(agent, time.Since(start))
		start = time.Now()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Write(one); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, one); err != nil {
			b.Fatal(err)
		}
		spawn = append(spawn, time.Since(start))
	}
	Report(b, "agent", agent)
	Report(b, "spawn", spawn)
}

// settle is how long ExecAgainstSpawn runs commands in the sandbox
// before it measures.
const settle = 2 * time.Second

// echoServer listens on a unix socket of b's and writes back what each
// connection sends.
func echoServer(b *testing.B) string {
	p := filepath.Join(b.TempDir(), "echo.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return p
}

// Report reports the p50 and p90 of d in milliseconds as PREFIX-p50-ms and
// PREFIX-p90-ms (what the performance gate reads).
func Report(b *testing.B, prefix string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	d = slices.Clone(d)
	slices.Sort(d)
	ms := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), prefix+"-p50-ms")
	b.ReportMetric(ms(0.9), prefix+"-p90-ms")
}
