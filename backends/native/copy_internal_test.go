package native

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// Without the shared volume, sbxd is copied into each container: into the
// root, or into an anonymous volume when the root is read-only.
func TestSbxdCopyFallback(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.ScratchImage)
	b, err := New(Config{PullPolicy: PullNever})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.sbxdCopy = true
	label := "sandboxkit.test-copy"
	dockertest.AssertNoLeftovers(t, cli, label, "1")
	for _, readOnly := range []bool{false, true} {
		sb, err := b.Create(t.Context(), backend.Spec{Image: dockertest.ScratchImage, ReadOnlyRootfs: readOnly,
			Labels: map[string]string{label: "1"}})
		if err != nil {
			t.Fatalf("read-only %v: %v", readOnly, err)
		}
		res, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"/testbin", "echo", "ok"}})
		if err != nil || string(res.Stdout) != "ok\n" {
			t.Errorf("read-only %v: %q %v", readOnly, res.Stdout, err)
		}
		if err := sb.Destroy(t.Context()); err != nil {
			t.Error(err)
		}
	}
}
