package server_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// TestExecuteKeepsOutputOrder: execute's answer and a job's output have
// stdout and stderr in the order the command wrote them (they went through
// two pipes, and came out swapped in most runs).
func TestExecuteKeepsOutputOrder(t *testing.T) {
	const command = "echo o1; echo e1 >&2; echo o2; echo e2 >&2; echo o3"
	const want = "o1\ne1\no2\ne2\no3\n"
	for _, noAgent := range []bool{false, true} {
		t.Run(map[bool]string{false: "sbxd", true: "no-agent"}[noAgent], func(t *testing.T) {
			s := newServer(t, localBackend(t), func(o *server.Options) { o.NoAgent = noAgent })
			call := servertest.HTTP(serveHTTP(t, s), "", "c")
			id := servertest.Create(t, call, nil)
			for range 20 {
				out := servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": command})
				if !assert.Equal(t, want+"Exit code: 0", out) {
					break
				}
			}
			for range 5 {
				job, _ := startJob(t, call, id, command)
				waitJobDone(t, call, id, job)
				out := servertest.Must(t, call, "job_output", map[string]any{"sandbox_id": id, "job_id": job})
				if !assert.True(t, strings.HasPrefix(out, want), out) {
					break
				}
			}
			// A blank command is still refused, and 2>&1 in a command
			// still works.
			assert.Contains(t, servertest.Fails(t, call, "execute", map[string]any{"sandbox_id": id, "command": "  "}), "command is empty")
			assert.Equal(t, "only-err\nExit code: 0", servertest.Must(t, call, "execute",
				map[string]any{"sandbox_id": id, "command": "{ echo only-err >&2; echo dropped; } 2>&1 >/dev/null"}))
		})
	}
}
