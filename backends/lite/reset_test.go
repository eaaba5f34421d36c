package lite

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// leaveBehind is what "task 1" leaves in a sandbox, one of each kind of
// state a later task could see: files in the working folder, /tmp,
// /dev/shm, /run and the agent's folder (a host folder bind-mounted into
// every generation), a POSIX message queue, environment in the files a
// login shell reads, processes detached every way busybox offers (setsid
// and double-forked, SIGHUP ignored in the background, daemonised by
// start-stop-daemon, a daemon that forks itself), listening TCP sockets
// and, with CAP_NET_ADMIN in the sandbox's own network namespace, an
// address and a route. The markers are written split ("8765"0...) so that
// no command line of the probe matches them.
const leaveBehind = `set -e
cd /work
echo t1 > leak-work
echo t1 > /tmp/leak-tmp
echo t1 > /dev/shm/leak-shm
mkdir -p /run && echo t1 > /run/leak-run
echo t1 > /.sbx-run/leak-agent
touch /dev/mqueue/leak-mq
echo 'export SBX_LEAK=t1' >> /etc/profile
echo 'export SBX_LEAK=t1' >> /root/.profile
setsid sh -c 'sleep 876501 </dev/null >/dev/null 2>&1 &'
sh -c 'trap "" HUP; sleep 876502 </dev/null >/dev/null 2>&1 &' &
start-stop-daemon -S -b -x /bin/sleep -- 876503
httpd -p 7777 -h /tmp
setsid sh -c 'nc -l -p 7778 </dev/null >/dev/null 2>&1 &'
ip addr add 10.200.0.1/32 dev lo
ip route add 10.201.0.0/24 dev lo
`

// probe prints one line for each thing of leaveBehind that the sandbox
// shows (and the agent's job, started separately): what a next task must
// not see.
const probe = `for f in /work/leak-work /tmp/leak-tmp /dev/shm/leak-shm /run/leak-run /.sbx-run/leak-agent /dev/mqueue/leak-mq /tmp/leak-via-agent; do
	test -e "$f" && echo "file $f"
done
grep -qs SBX_LEAK /etc/profile && echo "profile /etc/profile"
grep -qs SBX_LEAK /root/.profile && echo "profile /root/.profile"
[ -n "$(sh -lc 'echo $SBX_LEAK')" ] && echo "env of a login shell"
[ -n "$SBX_LEAK" ] && echo "env of a command"
for f in /proc/[0-9]*/cmdline; do
	c=$(tr '\0' ' ' < "$f" 2>/dev/null) || continue
	case "$c" in
	*"sleep 8765"0[1-4]*|*"httpd -p 777"7*|*"nc -l -p 777"8*) echo "process $c";;
	esac
done
ps -o args | grep -E 'sleep 8765[0]|httpd -p 777[7]|nc -l -p 777[8]' | sed 's/^/ps /'
for port in 1E61 1E62; do
	grep -qsE "^ *[0-9]+: [0-9A-F]+:$port [0-9A-F]+:[0-9A-F]+ 0A" /proc/net/tcp /proc/net/tcp6 && echo "listening $port"
done
ip addr show dev lo | grep -q 10.200.0.1 && echo "address 10.200.0.1"
ip route | grep -q 10.201.0.0 && echo "route 10.201.0.0/24"
true`

// everything is probe's output when nothing was cleaned.
var everything = []string{
	"file /work/leak-work", "file /tmp/leak-tmp", "file /dev/shm/leak-shm", "file /run/leak-run",
	"file /.sbx-run/leak-agent", "file /dev/mqueue/leak-mq", "file /tmp/leak-via-agent",
	"profile /etc/profile", "profile /root/.profile", "env of a login shell",
	"process sleep 876501 ", "process sleep 876502 ", "process /bin/sleep 876503 ", "process sleep 876504 ",
	"process httpd -p 7777 -h /tmp ", "process nc -l -p 7778 ",
	"ps sleep 876501", "ps sleep 876502", "ps /bin/sleep 876503", "ps sleep 876504", "ps httpd -p 7777 -h /tmp", "ps nc -l -p 7778",
	"listening 1E61", "listening 1E62", "address 10.200.0.1", "route 10.201.0.0/24",
}

// TestResetCrossesNoState is the test a warm pool's reuse rests on (see
// Backend.CleanReset): "task 1" leaves every kind of state in a sandbox
// (leaveBehind, and through the agent a file and a background job), the
// sandbox is Reset, and "task 2", through a new agent connection and a
// plain Exec, sees none of it. Rounds 2 and 3 start the standby that the
// previous Reset prepared (round 1 resets in place), with the agent's
// folder shared between the two generations.
func TestResetCrossesNoState(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	spec := e.spec("clean-reset")
	spec.WorkingDir = "/work"
	spec.CapAdd = []string{"NET_ADMIN"} // changes to its own network namespace
	checkResetCrossesNoState(t, b, spec)
}

func checkResetCrossesNoState(t *testing.T, b *Backend, spec backend.Spec) {
	if !b.CleanReset(spec) {
		t.Fatal("CleanReset is false for the test's spec")
	}
	ctx := t.Context()
	sb := create(t, b, spec)
	run := func(what string, sb backend.Sandbox, shell string) []string {
		t.Helper()
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: shell})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: exit %d, %v\n%s%s", what, res.ExitCode, err, res.Stdout, res.Stderr)
		}
		return strings.Split(strings.TrimSuffix(string(res.Stdout), "\n"), "\n")
	}
	agent := func() *sbxd.Client {
		t.Helper()
		c, err := sbxd.Wrap(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if info, err := c.Agent(ctx); err != nil || !info.Dialled {
			t.Fatalf("agent %+v, %v: want the sandbox's own, dialled", info, err)
		}
		return c
	}
	// gVisor mounts no /dev/mqueue (its queues live and die with its
	// sentry), its network stack without a network takes no addresses or
	// routes, and its processes are the sentry's, not the host's: there
	// the old generation's sentry ending is what says they all have.
	gvisor := b.runtime.gvisor()
	task1, want := leaveBehind, everything
	if gvisor {
		for _, l := range []string{"touch /dev/mqueue/leak-mq\n", "ip addr add 10.200.0.1/32 dev lo\n", "ip route add 10.201.0.0/24 dev lo\n"} {
			task1 = strings.ReplaceAll(task1, l, "")
		}
		want = slices.DeleteFunc(slices.Clone(want), func(s string) bool {
			return strings.Contains(s, "mqueue") || strings.HasPrefix(s, "address ") || strings.HasPrefix(s, "route ")
		})
	}
	for round := 1; round <= 3; round++ {
		c := agent()
		run("task 1", sb, task1)
		run("task 1 through the agent", c, "echo t1 > /tmp/leak-via-agent")
		if _, err := c.StartJob(ctx, backend.ExecRequest{Cmd: []string{"sleep", "876504"}}, 0); err != nil {
			t.Fatalf("a background job through the agent: %v", err)
		}
		// Every probe sees task 1's state before the Reset, so that its
		// silence after the Reset means something. (Processes started in
		// the background may take a moment.)
		var seen []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			seen = run("probe before Reset", sb, probe)
			if slices.Equal(sortedLines(seen), sortedLines(want)) || time.Now().After(deadline) {
				break
			}
		}
		if missing := lineDiff(want, seen); len(missing) > 0 {
			t.Fatalf("round %d: before the Reset the probe does not see %q (it sees %q)", round, missing, seen)
		}
		if jobs, err := c.Jobs(ctx); err != nil || len(jobs) != 1 {
			t.Fatalf("round %d: jobs before the Reset: %v, %v; want the one", round, jobs, err)
		}
		if procs := markedHostProcesses(); !gvisor && len(procs) != 6 {
			t.Fatalf("round %d: before the Reset the host sees task 1's processes %q, want 6", round, procs)
		}
		old, err := readMeta(sb.dir)
		if err != nil {
			t.Fatal(err)
		}
		if round > 1 {
			// The background work of the last Reset made a standby:
			// this Reset starts it.
			b.waitBackground()
			if m, _ := readMeta(sb.dir); !m.Standby.ready() {
				t.Fatalf("round %d: no standby to start: %+v", round, m.Standby)
			}
		}

		// Every process of the old generation has ended when Reset
		// returns, not merely left the namespaces task 2 sees (and not
		// thanks to the background work that removes the generation).
		b.bgHold.Lock()
		err = sb.Reset(ctx)
		procs := markedHostProcesses()
		ended := nsEnded(old.InitPID, old.InitStart)
		b.bgHold.Unlock()
		if err != nil {
			t.Fatalf("round %d: Reset: %v", round, err)
		}
		if len(procs) > 0 {
			t.Errorf("round %d: after Reset the host still runs task 1's processes %q", round, procs)
		}
		if !ended {
			t.Errorf("round %d: after Reset the old generation's first process (pid %d) still runs", round, old.InitPID)
		}
		c2 := agent() // the pool reconnects
		for _, via := range []struct {
			name string
			sb   backend.Sandbox
		}{{"a plain Exec", sb}, {"the agent", c2}} {
			if left := slices.DeleteFunc(run("task 2", via.sb, probe), func(s string) bool { return s == "" }); len(left) > 0 {
				t.Errorf("round %d: after Reset, task 2 through %s sees task 1's %q", round, via.name, left)
			}
		}
		if jobs, err := c2.Jobs(ctx); err != nil || len(jobs) != 0 {
			t.Errorf("round %d: after Reset the agent lists jobs %+v (%v), want none", round, jobs, err)
		}
		// The old connection ends with the old agent: an error, not a hang.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = c.Jobs(cctx)
		cancel()
		if err == nil {
			// The client reconnects by itself; then it sees the new agent.
			if jobs, _ := c.Jobs(ctx); len(jobs) != 0 {
				t.Errorf("round %d: the first connection's client still lists jobs %+v", round, jobs)
			}
		}
	}
}

// markedHostProcesses returns the command lines of the host's processes
// that leaveBehind and the agent's job started.
func markedHostProcesses() []string {
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		c := strings.ReplaceAll(string(data), "\x00", " ")
		if strings.Contains(c, "sleep 87650") || strings.HasPrefix(c, "httpd -p 7777") || strings.HasPrefix(c, "nc -l -p 7778") {
			out = append(out, c)
		}
	}
	return out
}

func sortedLines(lines []string) []string {
	return slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(lines), func(s string) bool { return s == "" })))
}

// lineDiff returns the lines of want that got lacks.
func lineDiff(want, got []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

// CleanReset is false exactly where a task can leave state that a Reset
// does not throw away.
func TestCleanResetSpecs(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	ro := backend.Volume{Source: t.TempDir(), Target: "/data", ReadOnly: true}
	rw := backend.Volume{Source: t.TempDir(), Target: "/data"}
	for _, c := range []struct {
		name  string
		edit  func(*backend.Spec)
		clean bool
	}{
		{"default", func(*backend.Spec) {}, true},
		{"own network", func(s *backend.Spec) { s.Network = NetworkNone }, true},
		{"net_admin", func(s *backend.Spec) { s.CapAdd = []string{"NET_ADMIN"} }, true},
		{"fewer capabilities", func(s *backend.Spec) { s.CapDrop = []string{"ALL"} }, true},
		{"read-only volume", func(s *backend.Spec) { s.Volumes = []backend.Volume{ro} }, true},
		{"no new privileges off", func(s *backend.Spec) { s.SecurityOpt = []string{"no-new-privileges:false"} }, true},
		{"host network", func(s *backend.Spec) { s.Network = NetworkHost }, false},
		{"privileged", func(s *backend.Spec) { s.Privileged = true }, false},
		{"sys_admin", func(s *backend.Spec) { s.CapAdd = []string{"SYS_ADMIN"} }, false},
		{"all capabilities", func(s *backend.Spec) { s.CapAdd = []string{"ALL"} }, false},
		{"seccomp unconfined", func(s *backend.Spec) { s.SecurityOpt = []string{"seccomp=unconfined"} }, false},
		{"writable volume", func(s *backend.Spec) { s.Volumes = []backend.Volume{ro, rw} }, false},
	} {
		spec := e.spec(c.name)
		c.edit(&spec)
		if got := b.CleanReset(spec); got != c.clean {
			t.Errorf("%s: CleanReset = %v, want %v", c.name, got, c.clean)
		}
	}
	hostDefault := e.cfg
	hostDefault.Network = NetworkHost
	hb, err := New(hostDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	if hb.CleanReset(e.spec("host by default")) {
		t.Error("CleanReset is true for a backend whose sandboxes are on the host's network by default")
	}
	if _, ok := backend.AsBackend[backend.CleanResetter](b); !ok {
		t.Error("lite is no backend.CleanResetter")
	}
}

// TestSettleWaitsForResetWork: Settle returns only once the background
// work a Reset started is done (the old generation gone, the standby for
// the next Reset made), so that a pool that settles a used sandbox hands
// it out with nothing of its own running beside the task.
func TestSettleWaitsForResetWork(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	ctx := t.Context()
	sb := create(t, b, e.spec("settle"))
	if err := sb.Settle(ctx); err != nil {
		t.Fatalf("Settle before any Reset: %v, want nil at once", err)
	}
	for round := 1; round <= 2; round++ { // in place, then from the standby
		// Held back, the Reset's background work has not begun: Settle
		// waits for it.
		b.bgHold.Lock()
		err := sb.Reset(ctx)
		if err != nil {
			b.bgHold.Unlock()
			t.Fatalf("round %d: Reset: %v", round, err)
		}
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = sb.Settle(sctx)
		cancel()
		b.bgHold.Unlock()
		if err == nil {
			t.Fatalf("round %d: Settle returned while the Reset's background work was held back", round)
		}
		if err := sb.Settle(ctx); err != nil {
			t.Fatalf("round %d: Settle: %v", round, err)
		}
		m, err := readMeta(sb.dir)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Standby.ready() || len(m.Retired) > 0 {
			t.Fatalf("round %d: after Settle the standby is %+v and the retired generations %v; want a ready standby and none", round, m.Standby, m.Retired)
		}
	}
}
