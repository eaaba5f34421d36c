package cli

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
	"github.com/sandboxkit/sandboxkit/internal/rootfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
	"github.com/sandboxkit/sandboxkit/server"
)

// The chaos test: sbx run, sbx up, sbx exec, pool keepers (sbx pool
// keep, with and without --sessions), sbx fork, sbx snapshot (of a
// sandbox, and -o of a session), sbx restore, sbx egress set and sbx
// serve (with a pool, while agents create sandboxes) are killed at random
// moments (SIGKILL, then SIGHUP, then their stdout closed), and after sbx
// gc nothing of ours may be left on the backend or the host but what a
// command handed over before it died (the forks and snapshots it printed,
// the sessions it completed, the sandboxes serve gave agents). It is long, so it
// runs only with SBX_CHAOS=1 (.ci/run sets it, in a step of its own, so no
// other test's sandboxes come and go meanwhile); SBX_CHAOS_SEED picks the
// seed (default: the time, printed).
const envChaos = "SBX_CHAOS"

// chaosTarget is one backend under test: its config and how to list what
// of ours exists on it.
type chaosTarget struct {
	config    string
	kills     int           // SIGKILLs at least
	maxDelay  time.Duration // kill delays are uniform in [0, maxDelay]
	inventory func(t *testing.T) []string
	// bundles: the backend saves images, so sbx snapshot -o of a kept
	// session is one of the commands killed.
	bundles bool
	// egress: the config has an entry "fenced" with an egress policy, and
	// sbx run of it and sbx egress set of a kept one are among the
	// commands killed.
	egress bool
	// forks: the backend forks and snapshots sandboxes, and sbx fork and
	// sbx snapshot of the kept sandbox are among the commands killed.
	forks bool
	// serve: sbx serve (the config's pool kept, agents creating
	// sandboxes) is one of the commands killed.
	serve bool
	// move, when set, is where sbx move of a fresh session sends it (a
	// config of another backend), and how to list what of ours is there.
	move *chaosMoveTo
}

// chaosMoveTo is the other side of sbx move.
type chaosMoveTo struct {
	config    string
	inventory func(t *testing.T) []string
}

func TestChaos(t *testing.T) {
	if os.Getenv(envChaos) != "1" {
		t.Skip("set SBX_CHAOS=1 to run the chaos test (minutes)")
	}
	bin := sbxBin(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SBX_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SBX_CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (SBX_CHAOS_SEED=%d repeats this run)", seed, seed)
	for _, target := range []struct {
		name string
		make func(t *testing.T) chaosTarget
	}{{"local", chaosLocal}, {"lite", chaosLite}, {"native", chaosNative}, {"k8s", chaosK8s}} {
		t.Run(target.name, func(t *testing.T) {
			runChaos(t, bin, target.make(t), rand.New(rand.NewPCG(seed, 0x5b)))
		})
	}
}

// chaosCredential gives the "fenced" entry a brokered credential, so that
// what its runs and forks make (CA, enforcer files) is in the inventory.
const chaosCredential = "[sandbox.sandboxes.fenced.credentials.api]\nhosts = [\"allowed.test\"]\nheader = \"X-Api-Key\"\nenv = \"API_KEY\"\nfrom_command = \"echo chaos-value\"\n"

func runChaos(t *testing.T, bin string, tg chaosTarget, rng *rand.Rand) {
	t.Setenv("SBX_CONFIG", tg.config)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv(EnvPoolDir, t.TempDir())
	inventory := func(t *testing.T) []string {
		inv := append(tg.inventory(t), bundleTemps(t)...)
		if tg.forks || tg.bundles {
			inv = append(inv, snapshotRefs(t)...)
		}
		return inv
	}
	before := inventory(t)

	// A sandbox for sbx exec, kept across the loop and removed at the end.
	r := sbx(t, "run", "--keep", "--", "true")
	r.expect(t, 0)
	kept := strings.TrimSpace(r.stderr[strings.LastIndexByte(strings.TrimSpace(r.stderr), '\n')+1:])

	// The run's sessions have names of their own: what a failed run
	// left on the backend (its sessions kept) must not clash.
	tag := hex.EncodeToString(binary.BigEndian.AppendUint32(nil, rand.Uint32()))
	keep := "chaoskeep-" + tag
	ops := []string{"run", "up", "exec", "keep", "keep-sessions", "claim"}
	outs := t.TempDir()
	if tg.bundles {
		// A session for sbx snapshot -o, kept across the loop (sbx
		// down removes it with the others at the end).
		sbx(t, "up", "--id", keep, "main").expect(t, 0)
		ops = append(ops, "bundle")
	}
	var bundle string
	if tg.bundles {
		// A bundle for sbx restore, written before the loop.
		bundle = filepath.Join(outs, "restore.tar")
		sbx(t, "snapshot", "-o", bundle, keep).expect(t, 0)
		ops = append(ops, "restore")
	}
	var fenced string
	if tg.egress {
		ops = append(ops, "run-egress", "egress-set")
		r := sbx(t, "run", "--keep", "--sandbox", "fenced", "--", "true")
		r.expect(t, 0)
		fenced = strings.TrimSpace(r.stderr[strings.LastIndexByte(strings.TrimSpace(r.stderr), '\n')+1:])
	}
	if tg.forks {
		ops = append(ops, "fork", "snapshot")
		if tg.egress {
			ops = append(ops, "fork-egress")
		}
	}
	if tg.serve {
		ops = append(ops, "serve")
		t.Setenv("SBX_API_KEY", "chaos-"+tag)
	}
	var moveBefore []string
	if tg.move != nil {
		ops = append(ops, "move")
		moveBefore = tg.move.inventory(t)
	}
	// What the commands handed over before they were stopped: the forks
	// and snapshots they printed are the caller's, not leaks.
	var forks, snaps, askedSnaps []string
	phases := []struct {
		name  string
		count int
		stop  func(cmd *exec.Cmd, out *os.File)
	}{
		{"SIGKILL", tg.kills, func(cmd *exec.Cmd, _ *os.File) { cmd.Process.Signal(syscall.SIGKILL) }},
		{"SIGHUP", max(tg.kills/5, 5), func(cmd *exec.Cmd, _ *os.File) { cmd.Process.Signal(syscall.SIGHUP) }},
		{"stdout closed", max(tg.kills/5, 5), func(_ *exec.Cmd, out *os.File) { out.Close() }},
	}
	n := 0
	ran := map[string]int{}
	var lastStop time.Time
	for _, ph := range phases {
		for i := 0; i < ph.count; i++ {
			n++
			op := ops[rng.IntN(len(ops))]
			var args []string
			switch op {
			case "run":
				args = []string{"run", "--", "sh", "-c", "echo started; sleep 60"}
			case "up":
				args = []string{"up", "--id", fmt.Sprintf("chaos%s-%d", tag, n)}
			case "exec":
				args = []string{"exec", kept, "--", "sh", "-c", "echo started; sleep 60"}
			case "keep":
				args = []string{"pool", "keep", "worker"}
			case "keep-sessions":
				args = []string{"pool", "keep", "--sessions", "worker"}
			case "bundle": // its snapshots, temporary folder and images
				args = []string{"snapshot", "-o", filepath.Join(outs, fmt.Sprintf("b%d.tar", n)), keep}
			case "run-egress": // lite: its network namespace, veth, rules and enforcer; native: its enforcer
				args = []string{"run", "--sandbox", "fenced", "--", "sh", "-c", "echo started; sleep 60"}
			case "claim": // from the pool a killed keeper may have left
				args = []string{"run", "--sandbox", "worker", "--", "sh", "-c", "echo started; sleep 60"}
			case "fork": // the forks' folders, containers, layers and images
				args = []string{"fork", "-n", "2", kept}
			case "fork-egress": // and their networks, rules and enforcers
				args = []string{"fork", "-n", "2", fenced}
			case "snapshot": // its image, layer or archive
				ref := fmt.Sprintf("chaos%s-%d", tag, n)
				args = []string{"snapshot", "--ref", ref, kept}
				askedSnaps = append(askedSnaps, "snapshot:"+ref)
			case "restore": // the loaded images, the session's sandboxes, volumes and network
				args = []string{"restore", bundle}
			case "egress-set":
				args = []string{"egress", "set", fenced, "--allow", fmt.Sprintf("n%d.allowed.test", n)}
			case "serve": // its pool's members and the sandboxes being made for agents
				args = []string{"serve", "--listen", "127.0.0.1:0"}
			case "move": // a fresh session: the bundle, both sides' images, sandboxes, volumes and networks
				id := fmt.Sprintf("chaosmv%s-%d", tag, n)
				sbx(t, "up", "--id", id, "main").expect(t, 0)
				args = []string{"move", id, "--to", tg.move.config}
			}
			maxDelay := tg.maxDelay
			if op == "move" || op == "restore" {
				// Longer: it saves, copies and loads images first.
				maxDelay *= 4
			}
			delay := time.Duration(rng.Int64N(int64(maxDelay) + 1))
			ran[op]++
			var during func(stderr *bufio.Reader)
			if op == "serve" {
				during = chaosAgents
			}
			out := chaosOnce(t, bin, args, delay, ph.stop, during)
			switch op {
			case "fork", "fork-egress":
				forks = append(forks, strings.Fields(out)...)
			case "snapshot":
				snaps = append(snaps, strings.Fields(out)...)
			}
			lastStop = time.Now()
		}
	}

	// A folder that local or lite made for a sandbox without its record
	// yet (its maker killed in between) is shown, and reaped, once it is
	// statedir.HalfGrace old: younger, it may be a Create in progress.
	time.Sleep(time.Until(lastStop.Add(statedir.HalfGrace)))
	gc := sbx(t, "gc", "--grace", "0")
	gc.expect(t, 0)
	t.Logf("gc after %d interruptions (%v):\n%s", n, ran, gc.stdout)
	// The sessions sbx up and sbx restore completed before they were
	// stopped are not leaks: they were asked for. Nor are the forks and
	// snapshots that were printed, and the sandboxes serve handed to
	// agents. Remove them, and the kept sandboxes.
	for _, id := range sessionsLeft(t) {
		sbx(t, "down", id)
	}
	for _, id := range forks {
		// A fork sbx printed is gone when sbx was killed after the
		// print and before the hand-over (backend.ForkRequest.Made): gc
		// removed it as being made by a process that died.
		if r := sbx(t, "rm", id); r.code != 0 && !strings.Contains(r.stderr, "not found") {
			t.Errorf("sbx rm %s (a printed fork): exit %d: %s", id, r.code, r.stderr)
		}
	}
	// A snapshot asked for by name and listed without its maker
	// (backend.LabelCreator) is complete and was handed over: sbx was
	// stopped after the backend returned it and before it printed its
	// name (lite writes the record last, once the files are in place). One
	// still naming its maker was not handed over: gc must have removed it.
	// (k8s has no snapshots and refuses sbx snapshot ls: no op asks.)
	if len(askedSnaps) > 0 {
		for _, sn := range snapshotList(t) {
			if slices.Contains(askedSnaps, sn.Ref) && !slices.Contains(snaps, sn.Ref) && sn.Labels[backend.LabelCreator] == "" {
				t.Logf("snapshot %s was made and not printed (stopped in between): asked for, not a leak", sn.Ref)
				snaps = append(snaps, sn.Ref)
			}
		}
	}
	if len(snaps) > 0 {
		sbx(t, append([]string{"snapshot", "rm"}, snaps...)...).expect(t, 0)
	}
	served := 0
	for _, sb := range listAll(t) {
		if sb.Labels[server.LabelConversation] != "" {
			sbx(t, "rm", sb.ID).expect(t, 0)
			served++
		}
	}
	t.Logf("handed over: %d forks, %d snapshots, %d sandboxes serve gave agents", len(forks), len(snaps), served)
	sbx(t, "rm", kept)
	if fenced != "" {
		sbx(t, "rm", fenced)
	}
	if tg.move != nil {
		// The other side: the sessions moves completed are asked for;
		// nothing else of them may be left once its gc ran.
		t.Setenv("SBX_CONFIG", tg.move.config)
		sbx(t, "gc", "--grace", "0").expect(t, 0)
		moved := sessionsLeft(t)
		for _, id := range moved {
			sbx(t, "down", id)
		}
		sbx(t, "gc", "--grace", "0").expect(t, 0)
		if left := added(moveBefore, tg.move.inventory(t)); len(left) > 0 {
			t.Errorf("left behind on sbx move's other side (seed above): %v", left)
		}
		t.Logf("sbx move completed %d sessions", len(moved))
		t.Setenv("SBX_CONFIG", tg.config)
	}
	sbx(t, "gc", "--grace", "0").expect(t, 0)
	if left := added(before, inventory(t)); len(left) > 0 {
		t.Errorf("left behind (seed above): %v\nhanded over: forks %v, snapshots %v", left, forks, snaps)
		t.Logf("sbx ls --all:\n%s", sbx(t, "ls", "--all").stdout)
	}
}

// chaosOnce starts sbx, stops it after delay with stop, and waits for it;
// it returns what sbx printed on stdout. during, when set, reads sbx's
// stderr as it runs (it must drain it) and acts meanwhile.
func chaosOnce(t *testing.T, bin string, args []string, delay time.Duration, stop func(*exec.Cmd, *os.File), during func(stderr *bufio.Reader)) string {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = pw
	// sbx's stderr goes to during, or is kept to be shown if sbx does not
	// end: read here, not by os/exec, so that Wait does not wait for what
	// a killed sbx left holding it.
	sr, sw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	cmd.Stderr = sw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	sw.Close()
	var stderr syncbuf.Buffer
	stderrRead := make(chan struct{})
	if during != nil {
		close(stderrRead)
		go during(bufio.NewReader(sr))
	} else {
		go func() {
			defer close(stderrRead)
			io.Copy(&stderr, sr)
		}()
	}
	// Drain stdout in the background, so sbx never blocks on it.
	var out strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
		}
	}()
	timer := time.NewTimer(delay)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Once sbx has exited the pipe is closed on our side: what sbx left
	// running (a killed sbx's command on local inherits its stdout) must
	// not hold the loop up; gc deals with it.
	select {
	case <-exited:
		timer.Stop()
		pr.Close()
		<-done
		return out.String()
	case <-timer.C:
	}
	stop(cmd, pr)
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		// A Go program prints every goroutine's stack on SIGQUIT and
		// exits: where it waits.
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		select {
		case <-stderrRead:
		case <-time.After(2 * time.Second): // held by what sbx left
		}
		errs := stderr.String()
		if during != nil {
			errs = "(read by the test as it ran)"
		} else if len(errs) > 64<<10 {
			errs = "...\n" + errs[len(errs)-64<<10:]
		}
		t.Errorf("sbx %s did not end within 2 minutes of being stopped; its stderr, with its goroutines on SIGQUIT:\n%s", strings.Join(args, " "), errs)
	}
	pr.Close()
	<-done
	return out.String()
}

// chaosAgents is sbx serve's during: once it listens, two agents (in
// conversations of their own) each ask it for a sandbox, the pool's
// entry and the first; their answers do not matter, serve is stopped
// whenever the delay says.
func chaosAgents(stderr *bufio.Reader) {
	for {
		line, err := stderr.ReadString('\n')
		if err != nil {
			return
		}
		m := listeningRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for i, entry := range []string{"worker", "main"} {
			go func() {
				body := fmt.Sprintf(`{"type":%q}`, entry)
				req, err := http.NewRequest(http.MethodPost, m[1]+"/tools/create_sandbox", strings.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("Authorization", "Bearer "+os.Getenv("SBX_API_KEY"))
				req.Header.Set(server.HeaderConversation, fmt.Sprintf("chaos-agent-%d", i))
				c := &http.Client{Timeout: time.Minute}
				if resp, err := c.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		break
	}
	io.Copy(io.Discard, stderr)
}

// snapshotRefs lists the backend's snapshots (sbx snapshot ls) but the
// transient ones (a bundle's, a restore's loaded images), which gc keeps
// for a grace period and the images inventory covers where it can.
func snapshotRefs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, s := range snapshotList(t) {
		if s.Labels[backend.LabelTransient] == "" {
			out = append(out, "snapshot "+s.Ref)
		}
	}
	return out
}

// snapshotList returns sbx snapshot ls --json.
func snapshotList(t *testing.T) []snapshotJSON {
	t.Helper()
	r := sbx(t, "snapshot", "ls", "--json")
	if r.code != 0 {
		t.Fatalf("sbx snapshot ls: %s", r.stderr)
	}
	var snaps []snapshotJSON
	if err := json.Unmarshal([]byte(r.stdout), &snaps); err != nil {
		t.Fatal(err)
	}
	return snaps
}

// listAll returns sbx ls --all --json.
func listAll(t *testing.T) []sandboxJSON {
	t.Helper()
	var out []sandboxJSON
	if err := json.Unmarshal([]byte(must(t, "ls", "--all", "--json")), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sessionsLeft lists the sessions sbx status shows.
// bundleTemps lists the temporary folders of bundles (session.PruneTemp).
func bundleTemps(t *testing.T) []string {
	matches, err := filepath.Glob(filepath.Join(os.TempDir(), "sbx-bundle-*"))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range matches {
		matches[i] = "bundle temp " + m
	}
	return matches
}

func sessionsLeft(t *testing.T) []string {
	t.Helper()
	var ids []string
	out := must(t, "status")
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) > 0 {
			ids = append(ids, f[0])
		}
	}
	return ids
}

func writeChaosConfig(t *testing.T, head, image string, more ...string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`%s
[sandbox.sandboxes.main]
image = %q
[sandbox.sandboxes.worker]
image = %q
[sandbox.sandboxes.worker.pool]
size = 2
`, head, image, image)+strings.Join(more, ""))
}

// labelEntries adds line (TOML) to every sandbox entry of config.
func labelEntries(t *testing.T, config, line string) {
	t.Helper()
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for l := range strings.Lines(string(data)) {
		out.WriteString(l)
		if h := strings.TrimSpace(l); strings.HasPrefix(h, "[sandbox.sandboxes.") && strings.Count(h, ".") == 2 {
			out.WriteString(line)
		}
	}
	if err := os.WriteFile(config, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// chaosRunLabel is the label (key = value, TOML) that every entry of a
// native chaos config carries, so that its inventory is its own and not
// that of other tests using the engine at the same time.
func chaosRunLabel(t *testing.T) (key, value, toml string) {
	var b [6]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	key, value = "sbx-chaos-run", hex.EncodeToString(b[:])
	return key, value, fmt.Sprintf("labels = { %s = %q }\n", key, value)
}

func chaosLocal(t *testing.T) chaosTarget {
	state := t.TempDir()
	config := writeChaosConfig(t, fmt.Sprintf("[sandbox]\nbackend = \"local\"\n[sandbox.local]\nstate_dir = %q\n", state), "")
	return chaosTarget{
		config:   config,
		forks:    true,
		serve:    true,
		kills:    50,
		maxDelay: 600 * time.Millisecond,
		inventory: func(t *testing.T) []string {
			// The snapshots folder is made once and kept: its files count.
			inv := slices.DeleteFunc(dirEntries(t, state, "state"), func(e string) bool { return e == "state snapshots" })
			inv = append(inv, dirEntries(t, filepath.Join(state, "snapshots"), "snapshot file")...)
			// Sandbox processes inherit the environment of the sbx that
			// made them, so this test's carry its SBX_CONFIG; other test
			// binaries running at the same time have local sandboxes too.
			inv = append(inv, processesWithEnv(t, local.EnvSandboxID, "SBX_CONFIG="+config)...)
			return append(inv, dirEntries(t, "/tmp/.sbxd", "agent")...)
		},
	}
}

func chaosLite(t *testing.T) chaosTarget {
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("lite: no runc: %v", err)
	}
	fs, err := rootfs.Busybox()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fs) })
	base := t.TempDir()
	state, runtimeRoot := filepath.Join(base, "state"), filepath.Join(base, "runtime")
	// The enforcers ask no DNS server here: nothing in the sandboxes
	// looks a name up.
	head := fmt.Sprintf("[sandbox]\nbackend = \"lite\"\n[sandbox.lite]\nstate_dir = %q\nimage_dir = %q\nruntime_root = %q\negress_dns = \"127.0.0.1\"\n",
		state, filepath.Join(base, "images"), runtimeRoot)
	fenced := fmt.Sprintf("\n[sandbox.sandboxes.fenced]\nimage = %q\negress = { allow = [\"allowed.test\"] }\n", "dir:"+fs) + chaosCredential
	return chaosTarget{
		config:   writeChaosConfig(t, head, "dir:"+fs, fenced),
		egress:   true,
		forks:    true,
		serve:    true,
		kills:    50,
		maxDelay: 800 * time.Millisecond,
		inventory: func(t *testing.T) []string {
			inv := dirEntries(t, state, "state")
			inv = append(inv, dirEntries(t, runtimeRoot, "runc")...)
			inv = append(inv, mountsUnder(t, base)...)
			matches, _ := filepath.Glob("/sys/fs/cgroup/*/sandboxkit-lite/*")
			more, _ := filepath.Glob("/sys/fs/cgroup/sandboxkit-lite/*")
			for _, m := range append(matches, more...) {
				if fi, err := os.Stat(m); err == nil && fi.IsDir() {
					inv = append(inv, "cgroup "+m)
				}
			}
			inv = append(inv, egressInventory(t, state)...)
			slices.Sort(inv)
			return inv
		},
		// A killed bundle's snapshot is a transient record that gc
		// removes only after a minute's grace: the images folder is not
		// in the inventory, its temporary folder is.
		bundles: true,
	}
}

func chaosNative(t *testing.T) chaosTarget {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	// Every entry's sandboxes (and the enforcers of "fenced", spares
	// included, which copy their labels) carry the run's label: the inventory's containers are
	// this config's.
	runKey, runValue, runLabel := chaosRunLabel(t)
	fenced := fmt.Sprintf("\n[sandbox.sandboxes.fenced]\nimage = %q\negress = { allow = [\"allowed.test\"] }\n", dockertest.BusyboxImage) + chaosCredential
	// Spare enforcers too: started after a create, removed at exit.
	config := writeChaosConfig(t, "[sandbox]\nbackend = \"native\"\n[sandbox.native]\negress_dns = \"127.0.0.1\"\negress_spares = 1\n", dockertest.BusyboxImage, fenced)
	labelEntries(t, config, runLabel)
	var move *chaosMoveTo
	if os.Getenv("SBX_REQUIRE_REMOTE") == "1" { // the remote harness is up (CI): sbx move goes there
		h := remotetest.Get(t)
		rcli := h.DockerClient(t)
		move = &chaosMoveTo{config: remoteConfig(t, h), inventory: func(t *testing.T) []string {
			return engineInventory(t, rcli, filters.NewArgs(filters.Arg("label", backend.LabelBackend)))
		}}
	}
	return chaosTarget{
		move:     move,
		config:   config,
		egress:   true,
		forks:    true,
		serve:    true,
		kills:    50,
		maxDelay: 1500 * time.Millisecond,
		inventory: func(t *testing.T) []string {
			return engineInventory(t, cli, filters.NewArgs(filters.Arg("label", runKey+"="+runValue)))
		},
		bundles: true,
	}
}

// engineInventory names what of ours is on a Docker engine: the
// containers that containers selects (enforcers and their spares, which
// copy their entry's labels, included), and the volumes (but the agent's
// cache), networks and images with the backend's label (snapshots', forks',
// bundles' and restores' images carry it).
func engineInventory(t *testing.T, cli *client.Client, containers filters.Args) []string {
	t.Helper()
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", backend.LabelBackend))
	if err := dockertest.SettleAutoRemove(ctx, cli, f); err != nil {
		t.Fatal(err)
	}
	var inv []string
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: containers})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		inv = append(inv, "container "+c.ID[:12])
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs.Volumes {
		if v.Labels["sandboxkit.native.sbxd"] == "" { // the agent's cache: kept on purpose
			inv = append(inv, "volume "+v.Name)
		}
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		inv = append(inv, "network "+n.Name)
	}
	// Snapshot, fork and bundle images carry the backend's label.
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if img.Labels["sandboxkit.native.helper"] == "" { // the agent's helper image: a cache, as its volume
			inv = append(inv, "image "+img.ID)
		}
	}
	slices.Sort(inv)
	return inv
}

func chaosK8s(t *testing.T) chaosTarget {
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	cs := c.Client(t)
	head := fmt.Sprintf("[sandbox]\nbackend = \"k8s\"\n[sandbox.k8s]\nkubeconfig = %q\nnamespace = %q\nimage_pull_policy = \"IfNotPresent\"\n", c.Kubeconfig, ns)
	return chaosTarget{
		config:   writeChaosConfig(t, head, k8stest.BusyboxImage),
		kills:    20,
		maxDelay: 3 * time.Second,
		inventory: func(t *testing.T) []string {
			// Deleted pods and claims stay listed while they terminate:
			// wait (bounded) for those, then count what is left.
			deadline := time.Now().Add(2 * time.Minute)
			for {
				inv, terminating := k8sInventory(t, cs, ns)
				if terminating == 0 || time.Now().After(deadline) {
					return inv
				}
				time.Sleep(time.Second)
			}
		},
	}
}

// k8sInventory names the pods and claims in ns, and counts those being
// deleted.
func k8sInventory(t *testing.T, cs kubernetes.Interface, ns string) ([]string, int) {
	ctx := context.Background()
	var inv []string
	terminating := 0
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		inv = append(inv, "pod "+p.Name)
		if p.DeletionTimestamp != nil {
			terminating++
		}
	}
	pvcs, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pvcs.Items {
		inv = append(inv, "pvc "+p.Name)
		if p.DeletionTimestamp != nil {
			terminating++
		}
	}
	slices.Sort(inv)
	return inv, terminating
}

// dirEntries names what is in dir ("" when it does not exist).
func dirEntries(t *testing.T, dir, kind string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() == "sbxd" || e.Name() == "bin" || strings.HasPrefix(e.Name(), ".") {
			continue // the agent binary a backend installs once: a cache
		}
		out = append(out, kind+" "+e.Name())
	}
	return out
}

// processesWithEnv names the live processes whose environment sets key
// and holds the entry also.
func processesWithEnv(t *testing.T, key, also string) []string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	var out []string
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		env := strings.Split(string(data), "\x00")
		if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, key+"=") }) && slices.Contains(env, also) {
			cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
			out = append(out, "process "+filepath.Base(filepath.Dir(p))+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// mountsUnder names the mount points below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, "mount "+f[4])
		}
	}
	return out
}

// egressInventory lists what lite's egress holds for the sandboxes of
// state dir state: claims naming it, and enforcers serving its sandboxes;
// and, machine-wide, egress namespaces, interfaces and nftables tables
// that no claim covers (a claim is made before them and dropped after
// them, so those are leaks whoever made them).
func egressInventory(t *testing.T, state string) []string {
	const claims = "/run/sandboxkit/egress"
	var inv []string
	claimed := map[string]bool{}
	ents, _ := os.ReadDir(claims)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(claims, e.Name()))
		if err != nil {
			continue
		}
		claimed[e.Name()] = true
		if strings.Contains(string(data), strconv.Quote(state)) {
			inv = append(inv, "egress claim "+e.Name())
		}
	}
	for _, p := range processesWithArg(t, "egress", state+"/") {
		inv = append(inv, "enforcer "+p)
	}
	unclaimed := func(kind, name, prefix string) {
		if n, ok := strings.CutPrefix(name, prefix); ok && !claimed[n] {
			inv = append(inv, "unclaimed egress "+kind+" "+name)
		}
	}
	nss, _ := os.ReadDir("/run/netns")
	for _, e := range nss {
		unclaimed("netns", e.Name(), "sbxe-")
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, e := range links {
		unclaimed("interface", e.Name(), "sbxe-")
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for line := range strings.Lines(string(out)) {
			if f := strings.Fields(line); len(f) == 3 {
				unclaimed("nftables table", f[2], "sbxe_")
			}
		}
	}
	// The rules lite adds to Docker's DOCKER-USER chain go with the last
	// egress network.
	if len(claimed) == 0 {
		if out, err := exec.Command("iptables", "-w", "-S", "DOCKER-USER").Output(); err == nil {
			for line := range strings.Lines(string(out)) {
				if strings.Contains(line, "sbxe-") {
					inv = append(inv, "DOCKER-USER rule "+strings.TrimSpace(line))
				}
			}
		}
	}
	return inv
}

// processesWithArg lists the processes whose second argument is sub and
// one of whose arguments contains also, as "PID ARGS".
func processesWithArg(t *testing.T, sub, also string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if len(args) > 1 && args[1] == sub && slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, also) }) {
			out = append(out, e.Name()+" "+strings.Join(args, " "))
		}
	}
	return out
}
