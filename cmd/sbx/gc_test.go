package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// gc reaps a sandbox whose removal or creation was cut short, and leaves
// one still being created by a live process.
func TestReapReasonHalfDone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gone, err := owner.Of(cmd.Process.Pid)
	cmd.Wait()
	if err != nil {
		t.Skip("the process exited before it could be named")
	}
	now := time.Now()
	for _, tt := range []struct {
		info backend.Info
		want string
	}{
		{backend.Info{State: backend.StateRemoving}, "its removal was cut short"},
		{backend.Info{State: backend.StateCreating, Labels: map[string]string{backend.LabelCreator: gone}}, "its creation was cut short"},
		{backend.Info{State: backend.StateCreating, Labels: map[string]string{backend.LabelCreator: owner.Self()}}, ""},
		{backend.Info{State: backend.StateRunning}, ""},
	} {
		if got := reapReason(tt.info, now); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("reapReason(%+v) = %q, want %q", tt.info, got, tt.want)
		}
	}
}
