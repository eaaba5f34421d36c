package backendtest

import (
	"context"
	"errors"
	"path"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// testCheckpointer commits a sandbox with a file written into it, makes a
// sandbox from the image, and reads the file there. The image is removed
// with WithImageRemover's function; without one it is left, and logged.
func (s *suite) testCheckpointer(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.Checkpointer](sb); !ok {
		t.Skip("the sandbox is not a Checkpointer")
	}
	sb = s.create(t, s.spec("checkpoint"))
	c, ok := backend.As[backend.Checkpointer](sb)
	if !ok {
		t.Fatal("the checkpoint case's sandbox is not a Checkpointer, though the suite's first sandbox is")
	}
	ctx := testCtx(t)
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	file := path.Join(info.WorkDir, "bt-checkpoint.txt")
	token := "checkpointed " + randomHex(6)
	mustExec(t, ctx, sb, backend.ExecRequest{Cmd: []string{"sh", "-c", `echo "$1" > "$2"`, "sh", token, file}})

	ref := "sandboxkit-backendtest/checkpoint:" + s.runID
	got, err := c.Checkpoint(ctx, ref)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("Checkpoint: %v", err)
	}
	if err != nil {
		t.Fatalf("Checkpoint(%q): %v", ref, err)
	}
	if got == "" {
		t.Fatalf("Checkpoint(%q) returned no image reference", ref)
	}
	// Registered before the second sandbox is made, so it runs after that
	// one is destroyed.
	t.Cleanup(func() {
		if s.cfg.removeImage == nil {
			t.Logf("the checkpoint image %s is left behind (Run has no WithImageRemover)", got)
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), destroyTimeout)
		defer cancel()
		if err := s.cfg.removeImage(ctx, got); err != nil {
			t.Errorf("cleanup: removing the checkpoint image %s: %v", got, err)
		}
	})

	spec := s.spec("from-checkpoint")
	spec.Image = got
	again := s.create(t, spec)
	res := mustExec(t, ctx, again, backend.ExecRequest{Cmd: []string{"cat", file}})
	checkOutput(t, "the file written before Checkpoint, in a sandbox made from the image", res.Stdout, token+"\n")
}
