package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// config check says which entries' types have no initializer (they run as
// plain sandboxes, as OpenSage's pdb_mcp does); an explicit type = "generic"
// is asked for, so not noted.
func TestConfigCheckPlainSandboxes(t *testing.T) {
	setup(t)
	cfg := writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.main]
[sandbox.sandboxes.pdb_mcp]
[sandbox.sandboxes.tools]
type = "generic"
[sandbox.sandboxes.worker]
`)
	r := sbx(t, "config", "check", cfg)
	r.expect(t, 0)
	want := "sandbox pdb_mcp: type pdb_mcp has no initializer; it runs as a plain sandbox from its keys\n" +
		"sandbox worker: type worker has no initializer; it runs as a plain sandbox from its keys\n"
	if !strings.HasSuffix(r.stdout, want) || strings.Contains(r.stdout, "sandbox main:") || strings.Contains(r.stdout, "sandbox tools:") {
		t.Errorf("stdout %q, want it to end with\n%s", r.stdout, want)
	}

	var res configCheckResult
	if err := json.Unmarshal([]byte(must(t, "--json", "config", "check", cfg)), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 2 || !strings.HasPrefix(res.Notes[0], "sandbox pdb_mcp: type pdb_mcp has no initializer") {
		t.Errorf("json notes %q", res.Notes)
	}
}

// config check reports an entry's mcp_services that the host cannot reach
// or that names no [mcp.services.NAME] table, naming the key.
func TestConfigCheckMCPServices(t *testing.T) {
	setup(t)
	const head = `
[mcp.services.pdb_mcp]
sse_port = 1112
[sandbox]
backend = "local"
[sandbox.sandboxes.pdb_mcp]
`
	r := sbx(t, "config", "check", writeConfig(t, head+"network = \"host\"\nmcp_services = [\"pdb_mcp\"]\n"))
	r.expect(t, 0)
	for _, tt := range []struct{ entry, want string }{
		{`mcp_services = ["pdb_mcp"]`, `sandbox.sandboxes.pdb_mcp.mcp_services: service "pdb_mcp": its sse_port 1112 is not published`},
		{`mcp_services = ["gdb_mcp"]`, `sandbox.sandboxes.pdb_mcp.mcp_services: service "gdb_mcp" has no [mcp.services.gdb_mcp] table (known: pdb_mcp)`},
	} {
		r := sbx(t, "config", "check", writeConfig(t, head+tt.entry+"\n"))
		r.expect(t, 1)
		if !strings.Contains(r.stderr, tt.want) {
			t.Errorf("stderr %q, want %q", r.stderr, tt.want)
		}
	}
}

// config check passes an OpenSage file whose [extra] tables hold keys of
// other backends and of OpenSage's own tools, and names each of them with
// its reader on stderr (and in --json's warnings).
func TestConfigCheckExtraWarnings(t *testing.T) {
	setup(t)
	cfg := writeConfig(t, `
[sandbox]
backend = "native"
[sandbox.sandboxes.main]
image = "busybox"
[sandbox.sandboxes.main.extra]
cpu_max = "50000 100000"
cached_rootfs_tar = "/tmp/main.tar"
`)
	r := sbx(t, "config", "check", cfg)
	r.expect(t, 0)
	for _, want := range []string{
		"warning: sandbox.sandboxes.main.extra.cpu_max: read by the lite backend, not by the native backend or the main initializer (ignored)\n",
		"warning: sandbox.sandboxes.main.extra.cached_rootfs_tar: read by OpenSage's cache loader, not by sandboxkit (ignored)\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q, want %q", r.stderr, want)
		}
	}
	var res configCheckResult
	if err := json.Unmarshal([]byte(must(t, "--json", "config", "check", cfg)), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 2 {
		t.Errorf("json warnings %q, want the two keys", res.Warnings)
	}
	// The same file on lite: cpu_max is read, only the cache key is named.
	r = sbx(t, "--backend", "lite", "config", "check", cfg)
	r.expect(t, 0)
	if strings.Contains(r.stderr, "cpu_max") || !strings.Contains(r.stderr, "cached_rootfs_tar") {
		t.Errorf("lite: stderr %q", r.stderr)
	}
}

// config check refuses what create would refuse, with the same reason: it
// asks the backend about every entry (backend.CheckSpec). Each case goes
// through both, on the local backend (no runtimes at all) and on native
// (the engine's runtimes: a level it lacks is refused naming how to add
// gVisor); what passes the check says the isolation create gives, also
// from OpenSandbox's [secure_runtime] table.
func TestConfigCheckAgreesWithCreate(t *testing.T) {
	setup(t)
	refused := func(t *testing.T, cfg string, want ...string) {
		t.Helper()
		t.Setenv("SBX_CONFIG", cfg)
		before := listSandboxes(t)
		check := sbx(t, "config", "check")
		up := sbx(t, "up")
		for _, r := range []result{check, up} {
			if r.code == 0 {
				t.Fatalf("accepted:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
			}
			for _, w := range want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not name %q", r.stderr, w)
				}
			}
		}
		// What other packages' tests make on a shared engine meanwhile
		// carries their run's label (server: sbx-server-test-run; backends:
		// sandboxkit.test-run) and is not this launch's; nor is what was
		// there before it.
		left := slices.DeleteFunc(listSandboxes(t), func(s sandboxJSON) bool {
			if slices.ContainsFunc(before, func(b sandboxJSON) bool { return b.ID == s.ID }) {
				return true
			}
			for k := range s.Labels {
				if strings.HasSuffix(k, "test-run") {
					return true
				}
			}
			return false
		})
		if len(left) != 0 {
			t.Errorf("a refused launch left %v", left)
		}
	}
	t.Run("local", func(t *testing.T) {
		refused(t, writeConfig(t, "[sandbox]\nbackend = \"local\"\nruntime = \"gvisor\"\n[sandbox.sandboxes.main]\n"),
			`runtime "gvisor"`, "local backend", "no runtime to choose")
		refused(t, writeConfig(t, "[sandbox]\nbackend = \"local\"\n[secure_runtime]\ntype = \"gvisor\"\n[sandbox.sandboxes.main]\n"),
			`runtime "gvisor"`, "local backend")
	})
	t.Run("lite", func(t *testing.T) {
		refused(t, liteConfig(t, "", "runtime = \"kata\"\n"), `runtime "kata"`, "lite backend", "it offers")
		if _, err := exec.LookPath("runsc"); err != nil {
			if os.Getenv("SBX_REQUIRE_RUNSC") == "1" {
				t.Fatal("no runsc (scripts/lite-setup.sh installs Debian's)")
			}
			t.Skip("no runsc (scripts/lite-setup.sh installs Debian's)")
		}
		var res configCheckResult
		if err := json.Unmarshal([]byte(must(t, "--json", "config", "check", liteConfig(t, "", "runtime = \"gvisor\"\n"))), &res); err != nil {
			t.Fatal(err)
		}
		if res.Isolation["main"] != backend.IsolationGVisor {
			t.Errorf("config check of lite with runtime = \"gvisor\" says isolation %q", res.Isolation["main"])
		}
	})
	t.Run("native", func(t *testing.T) {
		cli := dockertest.Client(t)
		dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
		head := fmt.Sprintf("[sandbox]\nbackend = \"native\"\n[sandbox.sandboxes.main]\nimage = %q\n", dockertest.BusyboxImage)
		refused(t, writeConfig(t, head+"runtime = \"kata\"\n"), `runtime "kata"`, "it offers", "daemon.json")
		refused(t, writeConfig(t, head+"runtime = \"no-such-runtime\"\n"), `runtime "no-such-runtime"`, "native")

		info, err := cli.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := info.Runtimes["runsc"]; !ok {
			if os.Getenv("SBX_REQUIRE_RUNSC") == "1" {
				t.Fatal("the engine has no runsc runtime (scripts/docker-setup.sh registers it)")
			}
			t.Skip("the engine has no runsc runtime (scripts/docker-setup.sh registers it)")
		}
		for _, cfg := range []string{
			head + "runtime = \"gvisor\"\n",
			"[secure_runtime]\ntype = \"gvisor\"\ndocker_runtime = \"runsc\"\n" + head,
		} {
			var res configCheckResult
			if err := json.Unmarshal([]byte(must(t, "--json", "config", "check", writeConfig(t, cfg))), &res); err != nil {
				t.Fatal(err)
			}
			if res.Isolation["main"] != backend.IsolationGVisor {
				t.Errorf("config check of\n%s\nsays isolation %q", cfg, res.Isolation["main"])
			}
		}
	})
}
