package server_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/config"
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

// A server keeping a warm pool of two "main" sandboxes: Create claims one
// of them for the conversation, and the keeper makes a replacement. Close
// removes the ready ones.
func Example_pool() {
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
		Pools:            map[string]config.PoolConfig{"main": {Size: 2}},
		DeleteOnShutdown: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	for i := 0; i < 3000 && s.PoolStats()[0].Ready < 2; i++ {
		time.Sleep(10 * time.Millisecond) // the keeper fills the pool
	}
	info, err := s.Create(context.Background(), "conv:demo", "main", 0)
	if err != nil {
		log.Fatal(err)
	}
	st := s.PoolStats()[0]
	fmt.Printf("%s from the pool of %s (size %d): %d claimed, %d made cold\n", info.Type, st.Entry, st.Size, st.Claimed, st.ColdFallbacks)
	// Output:
	// main from the pool of main (size 2): 1 claimed, 0 made cold
}
