package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// A fork or a snapshot whose maker (sbx fork, sbx snapshot) is killed
// before it hands it over is its maker's: sbx gc reclaims it, complete or
// not, while the forks and snapshots an sbx that finished printed stay.
// Each test kills a real sbx at a moment where what it made is complete
// (forks running, a snapshot's image committed) but not yet printed.

// gcNames runs sbx gc (--dry-run where other programs share the backend:
// a real gc would reap their leftovers under their feet) and returns what
// it names, by ID.
func gcNames(t *testing.T, dryRun bool) map[string]gcResult {
	t.Helper()
	args := []string{"--json", "gc"}
	if dryRun {
		args = append(args, "--dry-run")
	}
	var res []gcResult
	if err := json.Unmarshal([]byte(must(t, args...)), &res); err != nil {
		t.Fatal(err)
	}
	named := map[string]gcResult{}
	for _, r := range res {
		named[r.ID] = r
	}
	return named
}

// forksOf lists the IDs of the forks of sandbox parent (sbx ls).
func forksOf(t *testing.T, parent string) []string {
	t.Helper()
	var all []sandboxJSON
	if err := json.Unmarshal([]byte(must(t, "ls", "--all", "--json")), &all); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range all {
		if s.Labels[backend.LabelForkOf] == parent {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// checkReaped checks that gc names each of cut with a reason containing
// why, and none of kept.
func checkReaped(t *testing.T, named map[string]gcResult, cut, kept []string, why string) {
	t.Helper()
	for _, id := range cut {
		if r, ok := named[id]; !ok || !strings.Contains(r.Reason, why) {
			t.Errorf("gc names %+v for %s, made by the killed sbx; want it removed (%s)", r, id, why)
		}
	}
	for _, id := range kept {
		if r, ok := named[id]; ok {
			t.Errorf("gc would remove %s, which an sbx that finished printed: %+v", id, r)
		}
	}
}

// startSbx starts the sbx binary with args, its stdout in out.
func startSbx(t *testing.T, bin string, out *bytes.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// killedEngine is the Docker engine's API, passed on from a unix socket
// of its own: a process using it can be killed (SIGKILL) right after the
// engine answered a given request, before the answer reaches it.
type killedEngine struct {
	sock string
	mu   sync.Mutex
	at   func(*http.Request) bool // nil: pass everything on
	kill func()
}

func newKilledEngine(t *testing.T, upstream string) *killedEngine {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	network, addr := "tcp", u.Host
	if u.Scheme == "unix" {
		network, addr = "unix", u.Path
	}
	e := &killedEngine{sock: filepath.Join(t.TempDir(), "engine.sock")}
	var d net.Dialer
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.at != nil && e.at(resp.Request) {
				e.at = nil
				e.kill()
			}
			return nil
		},
	}
	ln, err := net.Listen("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return e
}

// run runs the sbx binary with args, kills it right after the engine
// answered the request at matches, and returns what it printed.
func (e *killedEngine) run(t *testing.T, bin string, at func(*http.Request) bool, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout = &out
	exited := make(chan struct{})
	// The process reaches the proxy's goroutine through a channel: cmd's
	// own field is written by Start in this one.
	started := make(chan *os.Process, 1)
	e.mu.Lock()
	e.at = at
	e.kill = func() {
		(<-started).Signal(syscall.SIGKILL)
		<-exited // before the answer goes on
	}
	e.mu.Unlock()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started <- cmd.Process
	err := cmd.Wait()
	close(exited)
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("sbx %s was not killed: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// killedEngineConfig points SBX_CONFIG at a native config whose engine is
// a killedEngine; its sandboxes carry a label of the test's run, which
// must be gone at the end.
func killedEngineConfig(t *testing.T) *killedEngine {
	t.Helper()
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	e := newKilledEngine(t, cli.DaemonHost())
	id := randomHex(t)
	dockertest.AssertNoLeftovers(t, cli, "sbx-test-run", id)
	t.Setenv("SBX_CONFIG", writeConfig(t, fmt.Sprintf(`
[sandbox]
backend = "native"
docker_host = "unix://%s"
[sandbox.native]
pull_policy = "never"
[sandbox.sandboxes.main]
image = %q
[sandbox.sandboxes.main.labels]
sbx-test-run = %q
`, e.sock, dockertest.BusyboxImage, id)))
	return e
}

// isCall reports whether r is a POST to the engine whose path ends in
// suffix (after the API version).
func isCall(r *http.Request, suffix string) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, suffix)
}

// On native, sbx fork -n 3 is killed once the engine started its second
// fork: the two running forks are reaped, a fork printed before is kept.
func TestGCKilledForkNative(t *testing.T) {
	bin := sbxBin(t)
	e := killedEngineConfig(t)
	pruneAtCleanup(t) // the forks' image
	parent := keep(t, "echo parent > f")
	t.Cleanup(func() { sbx(t, "rm", parent) })
	handed := strings.Fields(must(t, "fork", parent))
	t.Cleanup(func() { sbx(t, append([]string{"rm"}, handed...)...) })

	starts := 0
	out := e.run(t, bin, func(r *http.Request) bool {
		if isCall(r, "/start") && strings.Contains(r.URL.Path, "/containers/") {
			starts++
		}
		return starts == 2
	}, "fork", "-n", "3", parent)
	if out != "" {
		t.Fatalf("the killed sbx fork printed %q", out)
	}
	var cut []string
	for _, id := range forksOf(t, parent) {
		if !slices.Contains(handed, id) {
			cut = append(cut, id)
		}
	}
	t.Cleanup(func() { sbx(t, append([]string{"rm"}, cut...)...) })
	if len(cut) != 2 {
		t.Fatalf("the killed sbx fork left forks %v, want 2", cut)
	}
	checkReaped(t, gcNames(t, true), cut, handed, "its creation was cut short")
}

// On native, sbx snapshot is killed once the engine committed the image:
// the snapshot is reaped, one printed before is kept.
func TestGCKilledSnapshotNative(t *testing.T) {
	bin := sbxBin(t)
	e := killedEngineConfig(t)
	parent := keep(t, "echo parent > f")
	t.Cleanup(func() { sbx(t, "rm", parent) })
	handed := strings.TrimSpace(must(t, "snapshot", "--ref", "sandboxkit-test/sbx-handed:"+randomHex(t), parent))
	t.Cleanup(func() { removeSnapshot(t, handed) })

	out := e.run(t, bin, func(r *http.Request) bool { return isCall(r, "/commit") },
		"snapshot", "--ref", "sandboxkit-test/sbx-killed:"+randomHex(t), parent)
	if out != "" {
		t.Fatalf("the killed sbx snapshot printed %q", out)
	}
	var snaps []snapshotJSON
	if err := json.Unmarshal([]byte(must(t, "--json", "snapshot", "ls")), &snaps); err != nil {
		t.Fatal(err)
	}
	var cut []string
	for _, sn := range snaps {
		if sn.Sandbox == parent && sn.Ref != handed {
			cut = append(cut, sn.Ref)
			t.Cleanup(func() { removeSnapshot(t, sn.Ref) })
		}
	}
	if len(cut) != 1 {
		t.Fatalf("snapshots of %s besides %s: %v, want the killed sbx's one", parent, handed, cut)
	}
	checkReaped(t, gcNames(t, true), cut, []string{handed}, "its making was cut short")
}

// statedirRecords reads the records (as JSON maps) of the sandboxes under
// a state dir of local or lite, by ID.
func statedirRecords(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string]map[string]any{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "meta.json"))
		if err != nil {
			continue
		}
		var rec map[string]any
		if json.Unmarshal(data, &rec) == nil {
			recs[e.Name()] = rec
		}
	}
	return recs
}

// forkRecords are the records of the forks of parent under dir (not
// lite's fork standbys: containers made ahead for the next fork, which
// the parent names).
func forkRecords(t *testing.T, dir, parent string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for id, rec := range statedirRecords(t, dir) {
		if labels, _ := rec["labels"].(map[string]any); labels[backend.LabelForkOf] == parent && rec["standby_for"] == nil {
			out[id] = rec
		}
	}
	return out
}

// handedOver reports whether fork id's record under dir is complete, as
// statedir reads it: its creator cleared, or its batch handed over.
func handedOver(dir, id string) bool {
	l, err := statedir.Read[statedir.Lifecycle](filepath.Join(dir, id))
	return err == nil && l.Creator == ""
}

// killWhen runs the sbx binary with args and kills it as soon as ready
// says so (polled); handed is false when sbx printed something (it handed
// what it made over before the kill landed).
func killWhen(t *testing.T, bin string, ready func() bool, args ...string) (handed bool) {
	t.Helper()
	var out bytes.Buffer
	cmd := startSbx(t, bin, &out, args...)
	deadline := time.Now().Add(2 * time.Minute)
	for !ready() {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("sbx %s: not ready to be killed within 2 minutes", strings.Join(args, " "))
		}
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	return out.Len() > 0
}

// On local, sbx fork -n 4 is killed while it copies the parent's folder
// into a fork (that fork's record made, its Create done): gc removes the
// forks; a fork printed before stays. A kill that lands after sbx printed
// the forks proves nothing, and the test tries again.
func TestGCKilledForkLocal(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	// a is copied first, then b, big enough to be copying when the kill lands.
	parent := keep(t, "echo a > a && head -c 200000000 /dev/zero > b")
	t.Cleanup(func() { sbx(t, "rm", parent) })
	handed := strings.Fields(must(t, "fork", parent))
	t.Cleanup(func() { sbx(t, append([]string{"rm"}, handed...)...) })
	dir := openBackend(t).(*local.Backend).StateDir()

	copying := func() bool {
		for id := range forkRecords(t, dir, parent) {
			if _, err := os.Stat(filepath.Join(dir, id, "work", "a")); err == nil && !slices.Contains(handed, id) {
				return true
			}
		}
		return false
	}
	for try := 1; ; try++ {
		printed := killWhen(t, bin, copying, "fork", "-n", "4", parent)
		var cut []string
		for id := range forkRecords(t, dir, parent) {
			if !slices.Contains(handed, id) {
				cut = append(cut, id)
			}
		}
		if !printed {
			t.Logf("killed on try %d", try)
			t.Cleanup(func() { sbx(t, append([]string{"rm"}, cut...)...) })
			// The state is this test's: gc for real.
			checkReaped(t, gcNames(t, false), cut, handed, "its creation was cut short")
			if left := forksOf(t, parent); !slices.Equal(left, handed) {
				t.Errorf("after gc the forks of %s are %v, want %v", parent, left, handed)
			}
			return
		}
		sbx(t, append([]string{"rm"}, cut...)...)
		if try == 3 {
			t.Skip("sbx fork printed its forks before the kill landed, three times")
		}
	}
}

// On lite, sbx fork -n 8 is killed once a fork's container has run for
// 50 ms: gc names every fork it made; a fork printed before stays. The
// forks start at once: a kill that lands after sbx printed them proves
// nothing, and the test tries again. No fork is ever complete without its
// ID written (backend.ForkRequest.Made).
func TestGCKilledForkLite(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	t.Setenv("SBX_CONFIG", liteConfig(t, "", ""))
	parent := keep(t, "echo parent > f")
	t.Cleanup(func() { sbx(t, "rm", parent) })
	handed := strings.Fields(must(t, "fork", parent))
	t.Cleanup(func() { sbx(t, append([]string{"rm"}, handed...)...) })
	dir := openBackend(t).(*lite.Backend).StateDir()

	for try := 1; ; try++ {
		var since time.Time
		running := func() bool {
			for id, rec := range forkRecords(t, dir, parent) {
				if pid, _ := rec["init_pid"].(float64); pid != 0 && !slices.Contains(handed, id) && since.IsZero() {
					since = time.Now()
				}
			}
			return !since.IsZero() && time.Since(since) >= 50*time.Millisecond
		}
		printed := killWhen(t, bin, running, "fork", "-n", "8", parent)
		var cut []string
		complete := false
		for id := range forkRecords(t, dir, parent) {
			if !slices.Contains(handed, id) {
				cut = append(cut, id)
				complete = complete || handedOver(dir, id)
			}
		}
		if complete && !printed {
			// sbx fork writes the IDs before the hand-over.
			t.Fatalf("try %d: complete forks no one was told of (the hand-over came before the IDs were written): %v", try, cut)
		}
		if !printed {
			t.Logf("killed on try %d", try)
			t.Cleanup(func() { sbx(t, append([]string{"rm"}, cut...)...) })
			checkReaped(t, gcNames(t, true), cut, handed, "its creation was cut short")
			return
		}
		sbx(t, append([]string{"rm"}, cut...)...)
		if try == 3 {
			t.Skip("sbx fork printed its forks before the kill landed, three times")
		}
	}
}
