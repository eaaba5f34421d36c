package opensandbox_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

// A sandbox on an OpenSandbox deployment: domain and key come from the
// config or from OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY.
func Example() {
	b, err := opensandbox.New(opensandbox.Config{
		Domain: "opensandbox.example.com:8080",
		APIKey: os.Getenv("OPEN_SANDBOX_API_KEY"),
	})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	ctx := context.Background()
	sb, err := b.Create(ctx, backend.Spec{Name: "main", Image: "python:3.12", TTL: time.Hour})
	if err != nil {
		fmt.Println(err) // wraps backend.ErrUnavailable when the server cannot be reached
		return
	}
	defer sb.Destroy(ctx)
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"python3", "-c", "print(6*7)"}})
	if err != nil {
		panic(err)
	}
	fmt.Print(string(res.Stdout))
}

// The same against the in-process server of package opensandboxtest, as
// tests use it.
func Example_inProcessServer() {
	srv, err := opensandboxtest.NewServer(opensandboxtest.Options{APIKey: "k"})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	b, err := opensandbox.New(opensandbox.Config{Domain: srv.Domain(), APIKey: "k"})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	ctx := context.Background()
	sb, err := b.Create(ctx, backend.Spec{Name: "main", Image: "ubuntu:24.04"})
	if err != nil {
		panic(err)
	}
	defer sb.Destroy(ctx)
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo hello; exit 3"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q exit %d\n", res.Stdout, res.ExitCode)
	fmt.Println(b.Config().Redacted().APIKey)
	// Output:
	// "hello\n" exit 3
	// [redacted]
}
