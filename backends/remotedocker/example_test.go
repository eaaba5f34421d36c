package remotedocker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
)

// Run a command on a GPU server's Docker Engine over SSH. The connection is
// made by the first call; an unknown host key is refused with the fix.
func Example() {
	b, err := remotedocker.New(remotedocker.Config{
		Host:  "ssh://me@gpu-box", // or an alias of ~/.ssh/config
		Ports: remotedocker.PortsTunnel,
	})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	ctx := context.Background()
	sb, err := b.Create(ctx, backend.Spec{Name: "main", Image: "debian:12", Resources: backend.Resources{GPUs: "all"}})
	if hk, ok := errors.AsType[*remotedocker.HostKeyError](err); ok {
		fmt.Println("host key refused:", hk.Fingerprint) // the message has the known_hosts line to add
		return
	}
	if err != nil {
		fmt.Println(err) // e.g. wraps backend.ErrUnavailable when gpu-box cannot be reached
		return
	}
	defer sb.Destroy(ctx)
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "nvidia-smi -L"})
	if err != nil {
		panic(err)
	}
	fmt.Print(string(res.Stdout))
}
