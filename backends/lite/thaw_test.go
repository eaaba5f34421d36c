package lite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// A sandbox left frozen by a Snapshot or Fork whose process was killed
// (its freeze record names an owner that is gone) is thawed by Get and by
// PruneCaches; one frozen by a live process is left alone.
func TestThawOrphanFreeze(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	host, _ := os.Hostname()
	dead := host + ":999999999:1" // no such process
	for _, via := range []string{"Get", "PruneCaches"} {
		t.Run(via, func(t *testing.T) {
			sb := create(t, b, e.spec("frozen"))
			m, err := sb.meta()
			if err != nil {
				t.Fatal(err)
			}
			resume, err := sb.freeze(t.Context(), m)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(sb.dir, frozenFile))
			if err != nil || !strings.Contains(string(data), " ") {
				t.Fatalf("freeze wrote no record: %q, %v", data, err)
			}
			// A live freezer's record: nothing thaws it.
			if sb.thawOrphan(t.Context()) {
				t.Fatal("thawOrphan thawed a sandbox that this live process froze")
			}
			// The freezer "dies": its record now names a gone process.
			how, _, _ := strings.Cut(string(data), " ")
			if err := os.WriteFile(filepath.Join(sb.dir, frozenFile), []byte(how+" "+dead+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_ = resume // never called: the freezer was killed
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			if _, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo alive"}); err == nil {
				t.Errorf("Exec in a frozen sandbox answered (was it frozen?)")
			}
			cancel()
			switch via {
			case "Get":
				if _, err := b.Get(t.Context(), sb.ID()); err != nil {
					t.Fatal(err)
				}
			case "PruneCaches":
				names, err := b.PruneCaches(t.Context(), false)
				if err != nil || !strings.Contains(strings.Join(names, "\n"), "freeze of sandbox "+sb.ID()) {
					t.Errorf("PruneCaches: %v, %v; want the freeze named", names, err)
				}
			}
			if out := mustExec(t, sb, "echo alive"); out != "alive\n" {
				t.Errorf("after %s: %q", via, out)
			}
			if _, err := os.Stat(filepath.Join(sb.dir, frozenFile)); !os.IsNotExist(err) {
				t.Errorf("the freeze record is left: %v", err)
			}
		})
	}
}
