package lite

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveEndedSkipsRuncOnlyWhenEnded: a runc container whose first
// process has ended is deleted without starting the runtime (its state
// folder goes), and one whose first process still runs goes to the
// runtime's delete. A stand-in runtime binary records each call.
func TestRemoveEndedSkipsRuncOnlyWhenEnded(t *testing.T) {
	if testRuntime() != "runc" {
		t.Skip("removeEnded skips only runc's delete")
	}
	e := newTestEnv(t)
	b := e.open(t)
	calls := filepath.Join(t.TempDir(), "calls")
	stand := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\necho \"$@\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	sb := create(t, b, e.spec("ended"))
	m, err := sb.meta()
	if err != nil {
		t.Fatal(err)
	}
	rt := *m.runtime()
	state := filepath.Join(rt.root, m.ContainerID)
	if _, err := os.Stat(filepath.Join(state, "state.json")); err != nil {
		t.Fatalf("runc's state folder: %v", err)
	}

	// Running: the runtime is asked (the stand-in deletes nothing).
	standIn := rt
	standIn.path = stand
	if err := standIn.removeEnded(t.Context(), m.ContainerID); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(calls); len(data) == 0 {
		t.Fatal("removeEnded of a running container did not go to the runtime")
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("the stand-in runtime deleted nothing, yet the state folder is gone: %v", err)
	}

	// Ended: deleted here, no runtime call.
	os.Remove(calls)
	killInit(m.InitPID, m.InitStart)
	if err := standIn.removeEnded(t.Context(), m.ContainerID); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(calls); err == nil {
		t.Fatalf("removeEnded of an ended container started the runtime: %s", data)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("the state folder is left: %v", err)
	}
	// Once more: nothing to delete is not an error, and asks nobody.
	if err := standIn.removeEnded(t.Context(), m.ContainerID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(calls); err == nil {
		t.Fatal("removeEnded of a deleted container started the runtime")
	}
}
