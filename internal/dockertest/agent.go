package dockertest

import (
	"fmt"
	"testing"

	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// AgentSocket returns the engine-host path of the agent socket of sb (a
// native or remotedocker sandbox), through its init's root.
func AgentSocket(t testing.TB, cli *client.Client, sb backend.Sandbox) string {
	t.Helper()
	c, err := cli.ContainerInspect(t.Context(), containerID(t, sb))
	if err != nil {
		t.Fatal(err)
	}
	if c.State == nil || c.State.Pid <= 0 {
		t.Fatalf("container %s is not running", c.ID)
	}
	return fmt.Sprintf("/proc/%d/root/.sbx-run/agent.sock", c.State.Pid)
}

func containerID(t testing.TB, sb backend.Sandbox) string {
	t.Helper()
	c, ok := backend.As[interface{ ContainerID() string }](sb)
	if !ok {
		t.Fatalf("sandbox %s has no container ID", sb.ID())
	}
	return c.ContainerID()
}

// CheckAgentSocketSwap checks that the client dials victim's own agent
// (sbxd init, PID 1), and that attacker, which replaces its socket with a
// link to victim's, still gets its commands run in itself: the client
// refuses the link or the agent behind it, and starts an agent of its own.
func CheckAgentSocketSwap(t *testing.T, cli *client.Client, victim, attacker backend.Sandbox) {
	t.Helper()
	c, err := sbxd.Wrap(t.Context(), victim)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Agent(t.Context())
	c.Close()
	if err != nil || !info.Dialled || info.PID != 1 {
		t.Fatalf("victim's agent: %+v, %v; want the one sbxd init serves, dialled", info, err)
	}

	link := "rm /.sbx-run/agent.sock && ln -s " + AgentSocket(t, cli, victim) + " /.sbx-run/agent.sock && hostname"
	res, err := attacker.Exec(t.Context(), backend.ExecRequest{Shell: link})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("swapping the socket: exit %d, %v: %s", res.ExitCode, err, res.Stderr)
	}
	ac, err := sbxd.Wrap(t.Context(), attacker)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	out, err := ac.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"hostname"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Stdout) != string(res.Stdout) {
		t.Errorf("the attacker's command ran in another sandbox (hostname %q, its own %q)", out.Stdout, res.Stdout)
	}
	if ai, err := ac.Agent(t.Context()); err != nil || ai.Dialled {
		t.Errorf("attacker's agent: %+v, %v; want one the client started, not the one behind the link", ai, err)
	}
}
