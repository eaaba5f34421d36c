package agent

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
	"github.com/sandboxkit/sandboxkit/internal/spawn"
)

// The agent's commands start by spawn's fork (its fewer system calls are
// the point), with stdin from /dev/null or from the request, and a
// request's env replaces the agent's own variable of that name.
func TestCommandsStartBySpawn(t *testing.T) {
	s := NewServer(ServerOptions{StateDir: t.TempDir()})
	path := os.Getenv("PATH")
	for _, stdin := range []bool{false, true} {
		var out bytes.Buffer
		sink := sbxdwire.NewFrameSink(&out, func() error { return nil }, func(error) {})
		req := sbxdwire.ExecRequest{ID: "spawned", Argv: []string{"sh", "-c", `cat; exit 4`}, Stdin: stdin}
		before := spawn.FastStarts()
		res := s.runCommand(context.Background(), req, strings.NewReader("from stdin\n"), sink)
		if fast := spawn.FastStarts() > before; fast != spawn.Available() {
			t.Errorf("stdin %v: started by spawn's fork: %v, want %v", stdin, fast, spawn.Available())
		}
		if res.ExitCode != 4 || res.Error != "" {
			t.Errorf("stdin %v: result %+v, want exit 4", stdin, res)
		}
		if got := out.String(); strings.Contains(got, "from stdin") != stdin {
			t.Errorf("stdin %v: output %q: want stdin only when asked", stdin, got)
		}
	}
	// env itself (a shell would tidy the environment): one PATH, the
	// request's.
	var out bytes.Buffer
	sink := sbxdwire.NewFrameSink(&out, func() error { return nil }, func(error) {})
	req := sbxdwire.ExecRequest{ID: "env", Argv: []string{"env"}, Env: map[string]string{"PATH": "/first:" + path}}
	if res := s.runCommand(context.Background(), req, nil, sink); res.ExitCode != 0 {
		t.Fatalf("env: %+v", res)
	}
	if got := out.String(); strings.Contains(got, "PATH="+path+"\n") || !strings.Contains(got, "PATH=/first:"+path+"\n") {
		t.Errorf("env printed the agent's PATH or not the request's, want only the request's:\n%s", got)
	}
}
