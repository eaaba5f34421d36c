package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// pullEvents is what a one-layer pull reports.
var pullEvents = []backend.Progress{
	{Sandbox: "main", Step: "pull", Status: "Pulling from sandboxkit-test/pull"},
	{Sandbox: "main", Step: "pull", ID: "4f4fb700ef54", Status: "Pulling fs layer"},
	{Sandbox: "main", Step: "pull", ID: "4f4fb700ef54", Status: "Downloading", Current: 1024, Total: 2 << 20},
	{Sandbox: "main", Step: "pull", ID: "4f4fb700ef54", Status: "Downloading", Current: 2 << 20, Total: 2 << 20},
	{Sandbox: "main", Step: "pull", ID: "4f4fb700ef54", Status: "Pull complete"},
	{Sandbox: "main", Step: "pull", Status: "pulled 127.0.0.1:5000/sandboxkit-test/pull:1", Done: true},
	{Sandbox: "tool", Step: "build", Status: "Step 1/2 : FROM busybox", Current: 1, Total: 2},
	{Sandbox: "tool", Step: "build", Status: "Step 2/2 : RUN make", Current: 2, Total: 2},
	{Sandbox: "tool", Step: "build", Status: "built sbx-build/tool:latest", Current: 2, Total: 2, Done: true},
}

// Without a terminal, each step and each layer's status change is one line.
func TestPlainProgress(t *testing.T) {
	var buf bytes.Buffer
	sink, err := newProgress(progressAuto, &buf) // a buffer is no terminal
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pullEvents {
		sink.report(e)
	}
	sink.close()
	want := `[main] pull: Pulling from sandboxkit-test/pull
[main] pull 4f4fb700ef54: Pulling fs layer
[main] pull 4f4fb700ef54: Downloading (2.0 MiB)
[main] pull 4f4fb700ef54: Pull complete
[main] pull: pulled 127.0.0.1:5000/sandboxkit-test/pull:1
[tool] build: Step 1/2 : FROM busybox
[tool] build: Step 2/2 : RUN make
[tool] build: built sbx-build/tool:latest
`
	if got := buf.String(); got != want {
		t.Errorf("plain progress:\n%s\nwant:\n%s", got, want)
	}
}

// Bars (forced, as a terminal would get them) render every layer and build
// and finish, also when a step never reports Done.
func TestBarProgress(t *testing.T) {
	var buf bytes.Buffer
	sink, err := newProgress(progressBars, &buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pullEvents {
		sink.report(e)
	}
	sink.report(backend.Progress{Sandbox: "failed", Step: "pull", ID: "abc", Status: "Downloading", Current: 1, Total: 10})
	sink.close() // must not hang on the unfinished bar
	out := buf.String()
	for _, want := range []string{"[main] pull 4f4fb700ef54", "[tool] build", "built sbx-build/tool:latest", "2.0 MiB", "[failed] pull abc"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output lacks %q:\n%s", want, out)
		}
	}
	// Bars, not plain lines (whether mpb also moved the cursor depends on
	// how many refreshes it got to draw before close).
	if !strings.Contains(out, "[====") {
		t.Errorf("bar output has no bars:\n%q", out)
	}

	if _, err := newProgress("fancy", &buf); err == nil || !strings.Contains(err.Error(), "plain") {
		t.Errorf("bad mode: %v", err)
	}
	r := sbx(t, "--progress", "fancy", "ls")
	r.expect(t, 1)
}

// dockerConfig writes a native-backend config for the Docker tests of sbx,
// with the main entry labelled sbx-test-run=RUN, and fails the test if
// anything so labelled is left. It returns the config's path and RUN.
func dockerConfig(t *testing.T, entry string) (string, string) {
	t.Helper()
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	run := make([]byte, 6)
	rand.Read(run)
	id := hex.EncodeToString(run)
	dockertest.AssertNoLeftovers(t, cli, "sbx-test-run", id)
	cfg := writeConfig(t, fmt.Sprintf(`
[sandbox]
backend = "native"
[sandbox.sandboxes.main]
%s
[sandbox.sandboxes.main.labels]
sbx-test-run = %q
`, entry, id))
	t.Setenv("SBX_CONFIG", cfg)
	return cfg, id
}

// sbx run builds an entry's Dockerfile (relative to the config file) and
// shows the build as plain lines when stderr is no terminal.
func TestRunBuildsDockerfile(t *testing.T) {
	tag := "sandboxkit-test/sbx-build:" + randomHex(t)
	cfg, _ := dockerConfig(t, fmt.Sprintf("image = %q\nproject_relative_dockerfile_path = \"img/Dockerfile\"\nbuild_args = { WORD = \"argument\" }", tag))
	dir := filepath.Join(filepath.Dir(cfg), "img")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	df := "FROM " + dockertest.BusyboxImage + "\nARG WORD\nCOPY note.txt /note.txt\nRUN echo \"built with $WORD\" >> /note.txt\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "note.txt"), []byte("copied\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := dockertest.Client(t)
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})

	r := sbx(t, "run", "--", "cat", "/note.txt")
	r.expect(t, 0)
	if r.stdout != "copied\nbuilt with argument\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	for _, want := range []string{
		"[main] build: Step 1/4 : FROM " + dockertest.BusyboxImage + "\n",
		"[main] build: Step 4/4 : RUN echo \"built with $WORD\" >> /note.txt\n",
		"[main] build: built " + tag + "\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}

	// A failing build names the Dockerfile; nothing is made.
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df+"RUN echo broken step; exit 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = sbx(t, "--progress", "none", "run", "--", "true")
	r.expect(t, 1)
	for _, want := range []string{filepath.Join(dir, "Dockerfile"), "step 5/5", "broken step"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "[main] build:") {
		t.Errorf("--progress none printed progress:\n%s", r.stderr)
	}
}

// sbx run --image pulls from a registry (on loopback) and reports the pull.
func TestRunPullsWithProgress(t *testing.T) {
	dockerConfig(t, "")
	cli := dockertest.Client(t)
	ref := dockertest.PushUnique(t, cli, dockertest.Registry(t), dockertest.BusyboxImage)

	r := sbx(t, "run", "--image", ref, "--", "echo", "pulled")
	r.expect(t, 0)
	if r.stdout != "pulled\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var layer, downloading bool
	for _, l := range lines {
		layer = layer || strings.HasPrefix(l, "[main] pull ") && strings.HasSuffix(l, ": Pull complete")
		downloading = downloading || strings.HasPrefix(l, "[main] pull ") && strings.Contains(l, ": Downloading (")
	}
	if !layer || !downloading || lines[len(lines)-1] != "[main] pull: pulled "+ref {
		t.Errorf("pull progress:\n%s", r.stderr)
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
