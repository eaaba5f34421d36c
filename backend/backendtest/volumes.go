package backendtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// volumeTarget is where the VolumeManager case mounts its volume.
const volumeTarget = "/bt-volume"

// testVolumeManager makes a volume filled from a folder here, mounts it in
// two sandboxes, checks that both see its files and each other's writes,
// finds it by session and labels, and removes it (twice).
func (s *suite) testVolumeManager(t *testing.T) {
	vm, ok := backend.AsBackend[backend.VolumeManager](s.b)
	if !ok {
		t.Skip("the backend is not a VolumeManager")
	}
	if !s.caps.NamedVolumes {
		t.Fatal("the backend is a VolumeManager but its Capabilities say it cannot mount named volumes")
	}
	ctx := testCtx(t)
	base := s.spec("volume")
	session := s.runID + "-vol"
	token := randomHex(6)
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"seed.txt": "seed " + token + "\n", "sub/deeper.txt": "deeper\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vspec := backend.VolumeSpec{Session: session, Labels: base.Labels, FromPath: src, TTL: base.TTL}
	name, err := vm.CreateVolume(ctx, vspec)
	filled := true
	if errors.Is(err, errors.ErrUnsupported) {
		// A backend whose host paths are elsewhere may say so.
		t.Logf("CreateVolume with FromPath: %v; going on with an empty volume", err)
		filled, vspec.FromPath = false, ""
		name, err = vm.CreateVolume(ctx, vspec)
	}
	if err != nil {
		t.Fatalf("CreateVolume(%+v): %v", vspec, err)
	}
	if name == "" {
		t.Fatal("CreateVolume returned no name")
	}
	// Registered before the sandboxes are made, so it runs after they are
	// destroyed.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), destroyTimeout)
		defer cancel()
		if err := vm.RemoveVolume(ctx, name); err != nil {
			t.Errorf("cleanup: RemoveVolume(%q): %v", name, err)
		}
	})

	mounting := func(n string) backend.Spec {
		spec := s.spec(n)
		spec.Session = session
		spec.Volumes = append(slices.Clone(spec.Volumes), backend.Volume{Type: backend.VolumeNamed, Source: name, Target: volumeTarget})
		return spec
	}
	a := s.create(t, mounting("volume-a"))
	if filled {
		res := mustExec(t, ctx, a, backend.ExecRequest{Cmd: []string{"cat", volumeTarget + "/seed.txt", volumeTarget + "/sub/deeper.txt"}})
		checkOutput(t, "the volume's files from the host folder", res.Stdout, "seed "+token+"\ndeeper\n")
	}
	mustExec(t, ctx, a, backend.ExecRequest{Shell: `echo "from a" > ` + volumeTarget + `/from-a.txt`})
	b := s.create(t, mounting("volume-b"))
	res := mustExec(t, ctx, b, backend.ExecRequest{Shell: `cat ` + volumeTarget + `/from-a.txt && echo "from b" > ` + volumeTarget + `/from-b.txt`})
	checkOutput(t, "a file sandbox a wrote, read in sandbox b", res.Stdout, "from a\n")
	res = mustExec(t, ctx, a, backend.ExecRequest{Cmd: []string{"cat", volumeTarget + "/from-b.txt"}})
	checkOutput(t, "a file sandbox b wrote, read in sandbox a", res.Stdout, "from b\n")

	list := func(f backend.Filter) []string {
		t.Helper()
		vols, err := vm.ListVolumes(ctx, f)
		if err != nil {
			t.Fatalf("ListVolumes(%+v): %v", f, err)
		}
		var names []string
		for _, v := range vols {
			names = append(names, v.Name)
			if v.Name == name && (v.Session != session || v.Labels[labelRun] != s.runID) {
				t.Errorf("ListVolumes: %s has session %q and %s label %q, want %q and %q", name, v.Session, labelRun, v.Labels[labelRun], session, s.runID)
			}
		}
		return names
	}
	if got := list(backend.Filter{Session: session}); !slices.Equal(got, []string{name}) {
		t.Errorf("ListVolumes(session %s) = %v, want [%s]", session, got, name)
	}
	if got := list(backend.Filter{Labels: map[string]string{labelRun: s.runID}}); !slices.Contains(got, name) {
		t.Errorf("ListVolumes(label %s=%s) = %v, want %s in it", labelRun, s.runID, got, name)
	}
	if got := list(backend.Filter{Session: session + "-other"}); slices.Contains(got, name) {
		t.Errorf("ListVolumes(another session) = %v, want no %s", got, name)
	}

	for _, sb := range []backend.Sandbox{a, b} {
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("Destroy(%s): %v", sb.ID(), err)
		}
	}
	if err := vm.RemoveVolume(ctx, name); err != nil {
		t.Fatalf("RemoveVolume(%q): %v", name, err)
	}
	if got := list(backend.Filter{Session: session}); len(got) != 0 {
		t.Errorf("ListVolumes(session %s) after RemoveVolume = %v, want none", session, got)
	}
	if err := vm.RemoveVolume(ctx, name); err != nil {
		t.Errorf("RemoveVolume(%q) of a removed volume: %v, want nil", name, err)
	}
}
