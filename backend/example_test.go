package backend_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/backends/local"
)

// The lifecycle on any backend: create, exec (a non-zero exit is data, a
// timeout is exit code 124), move files, destroy.
func Example() {
	ctx := context.Background()
	state, _ := os.MkdirTemp("", "sandboxkit-example-")
	defer os.RemoveAll(state)
	var b backend.Backend
	b, err := local.New(local.Config{StateDir: state})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	sb, err := b.Create(ctx, backend.Spec{Name: "main", TTL: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)

	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo hello; exit 3"})
	if err != nil {
		log.Fatal(err) // infrastructure failure, not the command's
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)

	res, _ = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sleep", "10"}, Timeout: 100 * time.Millisecond})
	fmt.Println("timed out:", res.TimedOut, res.ExitCode)

	// File helpers use the sandbox's native file access when it has one and
	// fall back to Exec otherwise.
	if err := sbfiles.WriteFile(ctx, sb, "notes/todo.txt", strings.NewReader("ship it\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	rc, err := sbfiles.ReadFile(ctx, sb, "notes/todo.txt")
	if err != nil {
		log.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	fmt.Print(string(data))
	// Output:
	// exit 3: hello
	// timed out: true 124
	// ship it
}

// Optional capabilities are found through wrappers with As.
func ExampleAs() {
	ctx := context.Background()
	state, _ := os.MkdirTemp("", "sandboxkit-example-")
	defer os.RemoveAll(state)
	b, _ := local.New(local.Config{StateDir: state})
	sb, err := b.Create(ctx, backend.Spec{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)

	if r, ok := backend.As[backend.Renewer](sb); ok {
		_, err := r.Renew(ctx, 2*time.Hour)
		fmt.Println("renewed:", err == nil)
	}
	_, canPause := backend.As[backend.Pauser](sb)
	fmt.Println("can pause:", canPause)
	// Output:
	// renewed: true
	// can pause: false
}
