package backendtest

import (
	"errors"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// testLabeler sets, changes and removes a label of a sandbox and checks
// that Info, Get and List see each change, that the backend's own labels
// cannot be changed, and that an unknown sandbox is ErrNotFound.
func (s *suite) testLabeler(t *testing.T) {
	lb, ok := backend.AsBackend[backend.Labeler](s.b)
	if !ok {
		t.Skip("the backend is not a Labeler")
	}
	ctx := testCtx(t)
	sb := s.create(t, s.spec("labeler"))
	const key = "sandboxkit-test.label"
	value := randomHex(6)
	has := func(want string) {
		t.Helper()
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Labels[key]; got != want {
			t.Fatalf("Info: label %s = %q, want %q", key, got, want)
		}
		again, err := s.b.Get(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		if info, err = again.Info(ctx); err != nil || info.Labels[key] != want {
			t.Fatalf("Info after Get: label %s = %q (%v), want %q", key, info.Labels[key], err, want)
		}
		found := false
		infos, err := s.b.List(ctx, backend.Filter{Labels: map[string]string{key: value}})
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range infos {
			found = found || i.ID == sb.ID()
		}
		if found != (want == value) {
			t.Fatalf("List by %s=%s finds the sandbox: %v, want %v", key, value, found, want == value)
		}
	}
	if err := lb.SetLabels(ctx, sb.ID(), map[string]string{key: value}); err != nil {
		t.Fatalf("SetLabels: %v", err)
	}
	has(value)
	if err := lb.SetLabels(ctx, sb.ID(), map[string]string{key: "other"}); err != nil {
		t.Fatalf("SetLabels (change): %v", err)
	}
	has("other")
	if err := lb.SetLabels(ctx, sb.ID(), map[string]string{key: ""}); err != nil {
		t.Fatalf("SetLabels (remove): %v", err)
	}
	has("")
	if err := lb.SetLabels(ctx, sb.ID(), map[string]string{backend.LabelID: "x"}); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Errorf("SetLabels of %s: %v, want ErrInvalidConfig", backend.LabelID, err)
	}
	if err := lb.SetLabels(ctx, "no-such-sandbox-"+randomHex(4), map[string]string{key: "x"}); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("SetLabels of an unknown sandbox: %v, want ErrNotFound", err)
	}
}
