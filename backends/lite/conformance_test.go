package lite

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// TestConformance runs the backend suite on busybox sandboxes. Every
// backend it opens shares one state folder, as a restarted program would.
func TestConformance(t *testing.T) {
	e := newTestEnv(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return e.open(t) },
		backendtest.WithImage(e.image), backendtest.WithAgentCheck(sbxd.CheckAgent))
}

// TestFileops runs the fileops table on a busybox sandbox, through the
// native FileSystem and through the generic Exec path.
func TestFileops(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	spec := e.spec("fileops")
	// Not "/": the table's relative-path cases build expected paths as
	// wd+"/"+name, which is "//name" in the root folder.
	spec.WorkingDir = "/work"
	sb := create(t, b, spec)
	t.Run("native", func(t *testing.T) {
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
	})
	t.Run("generic", func(t *testing.T) {
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return backendtest.HideCapabilities(sb) })
	})
}

// TestConformanceThroughAgent runs the backend suite and the fileops table
// with every sandbox wrapped by the sbxd client, which reaches the agent
// that sbxd init started with the sandbox (DialAgent) instead of starting
// one through the runtime's exec.
func TestConformanceThroughAgent(t *testing.T) {
	e := newTestEnv(t)
	open := func(t *testing.T) backend.Backend { return sbxd.WrapBackend(e.open(t)) }
	t.Run("dialled", func(t *testing.T) {
		b := e.open(t)
		sb := create(t, b, e.spec("dialled"))
		c, err := sbxd.Wrap(t.Context(), sb)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		info, err := c.Agent(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !info.Dialled {
			t.Fatalf("agent %+v: want the sandbox's own, dialled", info)
		}
		res, err := c.Exec(t.Context(), backend.ExecRequest{Shell: "cat /proc/$PPID/cmdline | tr '\\0' ' '; echo; echo $PPID"})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "/.sbx/sbxd init --agent /.sbx-run/agent.sock --sandbox "+sb.ID()+" \n1\n" {
			t.Fatalf("a command's parent: %q (exit %d, %v), want the sandbox's first process, which is the agent", res.Stdout, res.ExitCode, err)
		}
		// The agent is the first process, so orphans come to it: it reaps
		// them and still gets its own commands' exit codes.
		res, err = c.Exec(t.Context(), backend.ExecRequest{Shell: "for i in 1 2 3 4 5; do (sleep 0.1 &); done; exit 3"})
		if err != nil || res.ExitCode != 3 {
			t.Fatalf("orphan maker: exit %d, %v; want 3", res.ExitCode, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, err := c.Exec(t.Context(), backend.ExecRequest{Shell: "grep -l '^[0-9]* ([^)]*) Z' /proc/[0-9]*/stat 2>/dev/null | wc -l; cat /proc/[0-9]*/comm | grep -c '^sleep$' || true"})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) == "0\n0\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("zombies, sleeps left after 10 s: %q", res.Stdout)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// A stale or missing socket is not fatal: sbxd starts an agent
		// through Attach instead.
		if err := os.Remove(filepath.Join(agentHostDir(sb.dir), agentSocket)); err != nil {
			t.Fatal(err)
		}
		c2, err := sbxd.Wrap(t.Context(), sb)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		info, err = c2.Agent(t.Context())
		if err != nil || info.Dialled {
			t.Fatalf("without the socket: agent %+v, %v; want one started through Attach", info, err)
		}
	})
	opts := []backendtest.Option{backendtest.WithImage(e.image), backendtest.WithAgentCheck(sbxd.CheckAgent)}
	if rt, err := lookRuntime(e.cfg.Runtime, ""); err == nil && rt.gvisor() {
		// The agent's terminals are ptys inside the sandbox, whose line
		// discipline in gVisor's releases before 2026 raises no signals.
		// lite's own terminals are the host's ptys, which runsc passes
		// the signals from: TestConformance checks them.
		opts = append(opts, backendtest.WithoutTerminalSignals("the agent's terminals are gVisor's ptys, which in this runsc send no SIGWINCH on a resize (google/gvisor#13317, fixed in 2026) and no SIGINT on Ctrl-C"))
	}
	backendtest.Run(t, open, opts...)
	t.Run("fileops", func(t *testing.T) {
		spec := e.spec("fileops-agent")
		spec.WorkingDir = "/work"
		sb, err := open(t).Create(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
	})
}

// The agent's socket lives in a folder the sandbox can write: a task that
// replaces it with a symlink to another socket of the host does not get
// the host's next DialAgent to connect there.
func TestDialAgentRefusesASymlink(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("symlink"))
	ctx := t.Context()
	conn, err := sb.DialAgent(ctx)
	if err != nil {
		t.Fatalf("DialAgent: %v", err)
	}
	conn.Close()
	hostSock := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "rm -f " + agentDir + "/" + agentSocket + " && ln -s " + hostSock + " " + agentDir + "/" + agentSocket})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("replacing the socket: %v %s", err, res.Stderr)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if conn, err := sb.DialAgent(dctx); err == nil {
		conn.Close()
		t.Fatal("DialAgent followed the sandbox's symlink")
	}
	select {
	case <-accepted:
		t.Fatal("the host's socket was dialled through the sandbox's symlink")
	default:
	}
}
