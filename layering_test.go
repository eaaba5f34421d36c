package sandboxkit

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sandboxkit/sandboxkit"

// goDeps lists the packages pkgs import, directly or not (go list -deps).
func goDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", strings.Join(pkgs, " "), err)
	}
	return strings.Fields(string(out))
}

// The layers of ARCHITECTURE.md, checked on the real import graph: a
// program that parses a config or runs sessions links no backend it did not
// register, and one that embeds native alone links no client-go.
func TestLayering(t *testing.T) {
	t.Run("config and session import no backend", func(t *testing.T) {
		for _, p := range goDeps(t, "./config", "./session") {
			if strings.HasPrefix(p, module+"/backends/") {
				t.Errorf("config or session imports %s", p)
			}
		}
	})
	t.Run("server imports no backend", func(t *testing.T) {
		// sbx serve's backend comes from cmd/sbx (the catalog), so that
		// a backend's own tests can run against the server's OpenSandbox
		// API (opensandboxtest) without an import cycle.
		for _, p := range goDeps(t, "./server") {
			if strings.HasPrefix(p, module+"/backends/") || p == module || p == module+"/catalog" {
				t.Errorf("server imports %s", p)
			}
		}
	})
	t.Run("sbx links no server and no Kubernetes", func(t *testing.T) {
		// Every linked package's initialisers run before main: sbx
		// hands what needs these to sbx-full (internal/cli's Features).
		for _, p := range goDeps(t, "./cmd/sbx") {
			switch {
			case p == module, p == module+"/catalog", p == module+"/server", p == module+"/backends/k8s",
				strings.HasPrefix(p, "k8s.io/"), strings.HasPrefix(p, "github.com/prometheus/"):
				t.Errorf("cmd/sbx links %s", p)
			}
		}
	})
	t.Run("backend imports only the standard library", func(t *testing.T) {
		// ... and internal/errdefs, the sentinels it shares with the
		// agent, a leaf of the standard library alone.
		for _, p := range goDeps(t, "./backend") {
			if p != module+"/backend" && p != module+"/internal/errdefs" && strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
				t.Errorf("backend imports %s", p)
			}
		}
		for _, p := range goDeps(t, "./internal/errdefs") {
			if p != module+"/internal/errdefs" && strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
				t.Errorf("internal/errdefs imports %s", p)
			}
		}
	})
	t.Run("backends import no other backend", func(t *testing.T) {
		names := backendDirs(t)
		for _, name := range names {
			for _, p := range goDeps(t, "./backends/"+name) {
				other, ok := strings.CutPrefix(p, module+"/backends/")
				other, _, _ = strings.Cut(other, "/")
				if !ok || other == name || (name == "remotedocker" && other == "native") || !slices.Contains(names, other) {
					continue
				}
				t.Errorf("backends/%s imports %s", name, p)
			}
		}
	})
	t.Run("native sessions link no client-go", func(t *testing.T) {
		for _, p := range goDeps(t, "./config", "./session", "./backends/native") {
			if strings.HasPrefix(p, "k8s.io/") {
				t.Errorf("a native-only session program links %s", p)
				break
			}
		}
	})
}

// backendDirs names the packages under backends/: every backend the
// module holds, whether or not the catalog lists it.
func backendDirs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("backends")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no backends under backends/")
	}
	return names
}
