package lite

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// runsc's network follows the bundle's network namespace: none for a new
// one with no path (lite's network "none"), sandbox for the namespace lite
// made (a path), host without one; the agent's socket and lite's overlay
// options are always there.
func TestRunscFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		ns   []specs.LinuxNamespace
		want string
	}{
		{"none", []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}}, "--network=none"},
		{"sandbox", []specs.LinuxNamespace{{Type: "network", Path: "/run/netns/x"}}, "--network=sandbox"},
		{"host", []specs.LinuxNamespace{{Type: "pid"}}, "--network=host"},
	} {
		bundle := t.TempDir()
		if err := writeConfig(bundle, &specs.Spec{Linux: &specs.Linux{Namespaces: c.ns}}); err != nil {
			t.Fatal(err)
		}
		got := runscFlags(bundle)
		if !slices.Contains(got, c.want) || !slices.Contains(got, "--host-uds=all") || !slices.Contains(got, "--overlay2=none") {
			t.Errorf("%s: runscFlags = %v, want %s, --host-uds=all and --overlay2=none", c.name, got, c.want)
		}
	}
}
