package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// loadSize is the load test's size: 50 conversations of 20 commands, or
// less with -short.
func loadSize() (convs, cmds int) {
	if testing.Short() {
		return 10, 5
	}
	return 50, 20
}

// runLoad has convs MCP clients over streamable HTTP each create a
// sandbox, run cmds commands checking every answer, and delete it. It
// returns the errors seen.
func runLoad(t *testing.T, s *server.Server, convs, cmds int) []error {
	url := serveHTTP(t, s) + "/mcp"
	var (
		mu   sync.Mutex
		errs []error
		ran  atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range convs {
		wg.Go(func() {
			call := servertest.MCP(mcpClient(t, url, nil))
			ctx := context.Background()
			text, isErr, err := call(ctx, "create_sandbox", map[string]any{})
			if err != nil || isErr {
				fail(fmt.Errorf("conversation %d: create: %v %s", i, err, text))
				return
			}
			id := strings.Fields(strings.TrimPrefix(text, "Created sandbox "))[0]
			for j := range cmds {
				want := fmt.Sprintf("conv%d-cmd%d", i, j)
				text, isErr, err := call(ctx, "execute", map[string]any{"sandbox_id": id, "command": "echo " + want})
				if err != nil || isErr || text != want+"\nExit code: 0" {
					fail(fmt.Errorf("conversation %d command %d: %v %q", i, j, err, text))
					continue
				}
				ran.Add(1)
			}
			if text, isErr, err := call(ctx, "delete_sandbox", map[string]any{"sandbox_id": id}); err != nil || isErr {
				fail(fmt.Errorf("conversation %d: delete: %v %s", i, err, text))
			}
		})
	}
	wg.Wait()
	t.Logf("load: %d conversations x %d commands: %d commands ran in %s, %d errors",
		convs, cmds, ran.Load(), time.Since(start).Round(time.Millisecond), len(errs))
	return errs
}

func TestLoadLocal(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	convs, cmds := loadSize()
	errs := runLoad(t, s, convs, cmds)
	assert.Empty(t, errs)
	infos, err := b.List(context.Background(), backend.Filter{})
	require.NoError(t, err)
	assert.Empty(t, infos, "leaked sandboxes")
}
