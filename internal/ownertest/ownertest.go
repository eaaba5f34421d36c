// Package ownertest holds test helpers about owners (package
// internal/owner): the owner string of a process that has ended, which
// a test writes where a killed maker's would be, and a sandbox's entry in
// its backend's List, which is what sbx gc reads.
package ownertest

import (
	"os/exec"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// Gone is the owner string of a process that has ended.
func Gone(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o, err := owner.Of(cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Listed is sandbox id's entry in b's List.
func Listed(t testing.TB, b backend.Backend, id string) backend.Info {
	t.Helper()
	infos, err := b.List(t.Context(), backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.ID == id {
			return i
		}
	}
	t.Fatalf("sandbox %s is not listed", id)
	return backend.Info{}
}
