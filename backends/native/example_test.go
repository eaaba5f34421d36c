package native_test

import (
	"context"
	"fmt"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
)

func Example() {
	b, err := native.New(native.Config{PullPolicy: native.PullMissing})
	if err != nil {
		panic(err)
	}
	defer b.Close()
	ctx := context.Background()
	sb, err := b.Create(ctx, backend.Spec{Name: "main", Image: "debian:12"})
	if err != nil {
		fmt.Println(err) // e.g. wraps backend.ErrUnavailable when no engine answers
		return
	}
	defer sb.Destroy(ctx)
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "uname -s"})
	if err != nil {
		panic(err)
	}
	fmt.Print(string(res.Stdout))
}
