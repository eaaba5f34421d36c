package k8s_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
)

func Example() {
	// Empty Kubeconfig: KUBECONFIG, else ~/.kube/config, else in-cluster.
	b, err := k8s.New(k8s.Config{Namespace: "agents", ImagePullPolicy: "IfNotPresent"}, k8s.WithLogger(slog.Default()))
	if err != nil {
		fmt.Println(err) // wraps backend.ErrInvalidConfig, naming the [sandbox.k8s] key
		return
	}
	defer b.Close()
	ctx := context.Background()
	sb, err := b.Create(ctx, backend.Spec{Name: "main", Image: "debian:12", Ports: []backend.Port{{Port: 8080}}})
	if err != nil {
		fmt.Println(err) // e.g. the pod's ImagePullBackOff or Unschedulable reason and events
		return
	}
	defer sb.Destroy(ctx)
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "uname -s"})
	if err != nil {
		panic(err)
	}
	fmt.Print(string(res.Stdout))
	// A host program reaches the pod's port through the API server.
	if e, ok := backend.As[backend.Endpointer](sb); ok {
		addr, _ := e.Endpoint(ctx, 8080)
		fmt.Println("dial", addr)
	}
}
