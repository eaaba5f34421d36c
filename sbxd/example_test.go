package sbxd_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// Wrap a sandbox: its Exec and file access then go through the agent, and
// everything built on backend.Sandbox (fileops, sbfiles.ReadFile) gets
// faster without changing.
func ExampleWrap() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sbxd-example-*")
	defer os.RemoveAll(dir)
	b, err := local.New(local.Config{StateDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	sb, err := b.Create(ctx, backend.Spec{Name: "main"})
	if err != nil {
		log.Fatal(err)
	}
	// The local backend runs host processes: the agent is a host binary.
	c, err := sbxd.Wrap(ctx, sb, sbxd.WithAgentPath(agentBin))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Destroy(ctx)

	res, err := c.Exec(ctx, backend.ExecRequest{Shell: "echo hello from $0"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(res.Stdout))
	fmt.Println("fell back:", c.Fallback() != nil)
	// Output:
	// hello from sh
	// fell back: false
}
