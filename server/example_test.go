package server_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/server"
)

// A server on the local backend, used directly; Handler, Serve and RunStdio
// put the same calls behind MCP and HTTP.
func Example() {
	dir, err := os.MkdirTemp("", "sbx-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b, err := local.New(local.Config{StateDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	s, err := server.New(server.Options{
		Backend:          b,
		Spec:             func(typ string) (backend.Spec, error) { return backend.Spec{Name: typ}, nil },
		DeleteOnShutdown: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	info, err := s.Create(ctx, "conv:demo", "main", 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Type, info.IdleTTL)
	list, err := s.List(ctx, "conv:someone-else")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(list), "sandboxes for another conversation")
	// Output:
	// main 30m0s
	// 0 sandboxes for another conversation
}
