package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
)

// remoteConfig writes the OpenSage-style remote config (backend =
// "remotedocker", docker_host = "ssh://...") for the harness host h.
func remoteConfig(t testing.TB, h *remotetest.Host) string {
	return remoteConfigEntry(t, h, "")
}

// remoteConfigEntry is remoteConfig with more lines in the main entry.
func remoteConfigEntry(t testing.TB, h *remotetest.Host, entry string) string {
	return writeConfig(t, `
[sandbox]
backend = "remotedocker"
docker_host = "`+h.SSHHost()+`"
[sandbox.remotedocker]
identity_file = "`+h.Key+`"
known_hosts = "`+h.KnownHosts+`"
ssh_config = "none"
remote_socket = "`+h.DockerSocket+`"
pull_policy = "never"
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
`+entry)
}

// TestRemoteDockerBackend drives sbx run, up (a session), the agent tools,
// status and down with the OpenSage-style remote config (backend =
// "remotedocker", docker_host = "ssh://...") against the harness host (a
// second dockerd behind sshd in a network namespace), and checks that the
// sandboxes lived on the remote engine and not on this machine's.
func TestRemoteDockerBackend(t *testing.T) {
	setup(t)
	h := remotetest.Get(t)
	local := dockertest.Client(t)
	remote, err := client.NewClientWithOpts(client.WithHost("unix://"+h.DockerSocket), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	t.Setenv("SBX_CONFIG", remoteConfig(t, h))

	r := sbx(t, "run", "--", "sh", "-c", "echo on the remote; exit 5")
	r.expect(t, 5)
	if r.stdout != "on the remote\n" {
		t.Errorf("sbx run: %q", r.stdout)
	}

	up := sbx(t, "up")
	up.expect(t, 0)
	session := ""
	for line := range strings.Lines(up.stdout) {
		if rest, ok := strings.CutPrefix(line, "session "); ok {
			session = strings.TrimSpace(rest)
		}
	}
	if session == "" {
		t.Fatalf("sbx up printed no session:\n%s", up.stdout)
	}
	t.Cleanup(func() { sbx(t, "down", session) })
	// containers lists the session's containers on an engine.
	containers := func(cli *client.Client) []container.Summary {
		list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", "sandboxkit.session="+session))})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	count := func(cli *client.Client) int { return len(containers(cli)) }
	if n, l := count(remote), count(local); n != 1 || l != 0 {
		t.Fatalf("session %s: %d containers on the remote engine, %d on the local one; want 1 and 0", session, n, l)
	}

	// By ID, not by the entry's name: a "main" another run left on the
	// shared remote engine would make the name ambiguous.
	id := containers(remote)[0].Labels[backend.LabelID]
	must(t, "tools", "write", id, "/shared/notes.txt", "--content", "kept on the server\n")
	if out := must(t, "tools", "grep", id, "server", "--path", "/shared"); !strings.Contains(out, "notes.txt") {
		t.Errorf("tools grep: %q", out)
	}
	if out := must(t, "status", session); !strings.Contains(out, "main") {
		t.Errorf("sbx status %s: %q", session, out)
	}
	must(t, "down", session)
	if n := count(remote); n != 0 {
		t.Errorf("%d containers of session %s left on the remote after sbx down", n, session)
	}
}
