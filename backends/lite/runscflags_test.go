package lite

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
)

// runsc's network follows the bundle's network namespace: none for a new
// one with no path (lite's network "none"), host for the namespace lite
// made (a path: see runscFlags for why not gVisor's own stack) and without
// one; the agent's socket, lite's overlay and the shared root file system
// options are always there.
func TestRunscFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		ns   []specs.LinuxNamespace
		want string
	}{
		{"none", []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}}, "--network=none"},
		{"egress", []specs.LinuxNamespace{{Type: "network", Path: "/run/netns/x"}}, "--network=host"},
		{"host", []specs.LinuxNamespace{{Type: "pid"}}, "--network=host"},
	} {
		bundle := t.TempDir()
		if err := writeConfig(bundle, &specs.Spec{Linux: &specs.Linux{Namespaces: c.ns}}); err != nil {
			t.Fatal(err)
		}
		got := runscFlags(bundle)
		for _, want := range []string{c.want, "--host-uds=all", "--overlay2=none", "--file-access=shared"} {
			if !slices.Contains(got, want) {
				t.Errorf("%s: runscFlags = %v, want %s among them", c.name, got, want)
			}
		}
	}
}

// gVisor's container gets /tmp as a bind mount of its own root file
// system's /tmp (else runsc hides it under a tmpfs the host cannot see),
// remade for each bundle, before the mounts inside /tmp, read-only with a
// read-only root, and never over the spec's own /tmp or through a symlink.
func TestRunscTmp(t *testing.T) {
	dir := t.TempDir()
	bundle := func(gen int, tmp string) string {
		b := bundleDir(dir, gen)
		if err := os.MkdirAll(filepath.Join(b, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
		switch tmp {
		case "dir":
			os.Mkdir(filepath.Join(b, "rootfs", "tmp"), 0o1777)
		case "symlink":
			os.Symlink("/", filepath.Join(b, "rootfs", "tmp"))
		}
		return b
	}
	tmpMounts := func(s *specs.Spec) []specs.Mount {
		var out []specs.Mount
		for _, m := range s.Mounts {
			if strings.HasPrefix(m.Destination, "/tmp") {
				out = append(out, m)
			}
		}
		return out
	}
	b0 := bundle(0, "dir")
	s := &specs.Spec{Root: &specs.Root{Path: "rootfs"}, Mounts: []specs.Mount{
		{Destination: "/proc", Type: "proc"},
		{Destination: "/tmp/data", Type: "bind", Source: "/srv/data"},
	}}
	if !runscTmp(s, b0) {
		t.Fatal("runscTmp made no /tmp mount")
	}
	want := filepath.Join(b0, "rootfs", "tmp")
	if got := tmpMounts(s); len(got) != 2 || got[0].Source != want || got[0].Destination != "/tmp" || !slices.Contains(got[0].Options, "rw") || got[1].Destination != "/tmp/data" {
		t.Fatalf("mounts under /tmp = %+v; want %s on /tmp (rw), then /tmp/data", got, want)
	}
	if runscTmp(s, b0) {
		t.Error("runscTmp changed a config made for its bundle already")
	}
	// A standby's copy of the config gets its own generation's folder.
	b1 := bundle(1, "dir")
	s.Root.Readonly = true
	if !runscTmp(s, b1) {
		t.Fatal("runscTmp kept another generation's /tmp")
	}
	if got := tmpMounts(s); len(got) != 2 || got[0].Source != filepath.Join(b1, "rootfs", "tmp") || !slices.Contains(got[0].Options, "ro") {
		t.Fatalf("mounts under /tmp of generation 1 = %+v; want its own, read-only, first", got)
	}
	// No folder to bind (a symlink): no mount, not even the old one.
	b2 := bundle(2, "symlink")
	if !runscTmp(s, b2) || len(tmpMounts(s)) != 1 {
		t.Fatalf("with /tmp a symlink: mounts under /tmp = %+v; want /tmp/data alone", tmpMounts(s))
	}
	// The spec's own /tmp stays as it is.
	own := &specs.Spec{Mounts: []specs.Mount{{Destination: "/tmp", Type: "bind", Source: "/srv/tmp"}}}
	if runscTmp(own, b0) || len(own.Mounts) != 1 || own.Mounts[0].Source != "/srv/tmp" {
		t.Fatalf("a volume on /tmp became %+v", own.Mounts)
	}
}

// Spec.Runtime "gvisor", the runtime level, picks runsc on a backend
// whose default is another runtime; the sandbox reports gVisor's
// isolation through the runtime it runs on.
func TestRuntimeLevelGVisor(t *testing.T) {
	if _, err := lookRuntime("runsc", ""); err != nil {
		t.Skipf("no runsc: %v", err)
	}
	e := newTestEnv(t)
	e.cfg.Runtime = "runc"
	b := e.open(t)
	if !slices.Contains(b.Capabilities().Runtimes, backend.RuntimeGVisor) {
		t.Fatalf("Capabilities().Runtimes = %v, want %q among them", b.Capabilities().Runtimes, backend.RuntimeGVisor)
	}
	spec := e.spec("gvisor-level")
	spec.Runtime = backend.RuntimeGVisor
	sb := create(t, b, spec)
	m, err := sb.meta()
	if err != nil || !m.runtime().gvisor() {
		t.Fatalf("the sandbox runs on %q (%v), want runsc", m.Runtime, err)
	}
	if info, err := sb.Info(t.Context()); err != nil || info.Isolation != backend.IsolationGVisor {
		t.Errorf("Info: isolation %q (%v), want %q", info.Isolation, err, backend.IsolationGVisor)
	}
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: "dmesg | grep -qi gvisor && echo gvisor"})
	if err != nil || string(res.Stdout) != "gvisor\n" {
		t.Errorf("dmesg in the sandbox: %q %q (%v), want gVisor's", res.Stdout, res.Stderr, err)
	}
}

// A backend whose runtime is a gVisor release installed beside runsc
// (runsc-SOMETHING, as scripts/gvisor-release.sh installs one) offers the
// level "gvisor", and the level means that release, not Debian's runsc.
func TestRuntimeLevelGVisorRelease(t *testing.T) {
	release := filepath.Join(t.TempDir(), "runsc-20991231")
	if err := os.WriteFile(release, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t)
	e.cfg.Runtime = release
	b := e.open(t)
	if !slices.Contains(b.Capabilities().Runtimes, backend.RuntimeGVisor) {
		t.Fatalf("Capabilities().Runtimes = %v, want %q among them", b.Capabilities().Runtimes, backend.RuntimeGVisor)
	}
	rt, err := b.checkSpec(backend.Spec{Runtime: backend.RuntimeGVisor})
	if err != nil || rt.path != release {
		t.Fatalf("runtime %q means %+v (%v), want %s", backend.RuntimeGVisor, rt, err, release)
	}
}
