package backendtest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// testOptional runs a subtest per optional capability; each skips when the
// sandbox (found through Unwrap chains) or, for volumes and networks, the
// backend does not implement it.
func (s *suite) testOptional(t *testing.T) {
	sb := s.create(t, s.spec("optional"))
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, sb backend.Sandbox)
	}{
		{"Renewer", s.testRenewer},
		{"Attacher", testAttacher},
		{"Archiver", testArchiver},
		{"Pauser", s.testPauser},
		{"Endpointer", s.testEndpointer},
		{"Checkpointer", s.testCheckpointer},
		{"Resetter", s.testResetter},
		{"Stopper", s.testStopper},
		{"Discarder", s.testDiscarder},
		{"Snapshotter", s.testSnapshotter},
		{"Forker", s.testForker},
		{"LogReader", s.testLogReader},
		{"AgentDialer", testAgentDialer(s.cfg.agentCheck)},
		{"Terminaler", s.testTerminaler},
		{"VolumeManager", func(t *testing.T, _ backend.Sandbox) { s.testVolumeManager(t) }},
		{"NetworkManager", func(t *testing.T, _ backend.Sandbox) { s.testNetworkManager(t) }},
		{"Labeler", func(t *testing.T, _ backend.Sandbox) { s.testLabeler(t) }},
		{"Claimer", func(t *testing.T, _ backend.Sandbox) { s.testClaimer(t) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, sb)
		})
	}
}

func (s *suite) testRenewer(t *testing.T, sb backend.Sandbox) {
	r, ok := backend.As[backend.Renewer](sb)
	if !ok {
		t.Skip("the sandbox is not a Renewer")
	}
	ctx := testCtx(t)
	old, err := sb.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	const ttl = 2 * time.Hour
	exp, err := r.Renew(ctx, ttl)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if want := time.Now().Add(ttl); exp.Before(want.Add(-time.Minute)) || exp.After(want.Add(time.Minute)) {
		t.Errorf("Renew(%v) = %v, want about %v", ttl, exp, want)
	}
	if !exp.After(old.ExpiresAt) {
		t.Errorf("Renew(%v) = %v, not after the old expiry %v", ttl, exp, old.ExpiresAt)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	// Labels may keep whole seconds.
	if d := info.ExpiresAt.Sub(exp).Abs(); d > time.Second {
		t.Errorf("Info().ExpiresAt = %v after Renew, want %v", info.ExpiresAt, exp)
	}
	infos, err := s.b.List(ctx, backend.Filter{Name: "optional", Labels: map[string]string{labelRun: s.runID}})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 1 || infos[0].ExpiresAt.Sub(exp).Abs() > time.Second {
		t.Errorf("List after Renew = %+v, want one entry expiring at %v", infos, exp)
	}
}

func testAttacher(t *testing.T, sb backend.Sandbox) {
	a, ok := backend.As[backend.Attacher](sb)
	if !ok {
		t.Skip("the sandbox is not an Attacher")
	}
	t.Run("stdin to stdout", func(t *testing.T) {
		t.Parallel()
		stderr := newSyncBuffer()
		p, err := a.Attach(testCtx(t), backend.ExecRequest{Shell: `echo started >&2; exec cat`, Stderr: stderr})
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		out := bufio.NewReader(p.Stdout())
		// Each line must come back before stdin is closed: the stream is
		// interactive.
		for _, line := range []string{"hello over stdin\n", "second line\n"} {
			if _, err := io.WriteString(p.Stdin(), line); err != nil {
				p.Kill()
				t.Fatalf("writing to Stdin: %v", err)
			}
			if got := readLine(t, out, p); got != line {
				t.Errorf("read back %q, want %q", got, line)
			}
		}
		if err := p.Stdin().Close(); err != nil {
			t.Errorf("closing Stdin: %v", err)
		}
		code, err := wait(t, p)
		if code != 0 || err != nil {
			t.Errorf("Wait = %d, %v; want 0, nil (cat ends at the end of its stdin)", code, err)
		}
		checkOutput(t, "Stderr writer", stderr.Bytes(), "started\n")
	})
	t.Run("Kill ends the process tree", func(t *testing.T) {
		t.Parallel()
		p, err := a.Attach(testCtx(t), backend.ExecRequest{Shell: treeScript + "; wait"})
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		pids := parsePIDs([]byte(readLine(t, bufio.NewReader(p.Stdout()), p)))
		if err := p.Kill(); err != nil {
			t.Errorf("Kill: %v", err)
		}
		wait(t, p)
		checkGone(t, sb, pids)
	})
	t.Run("cancel ends the process", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		p, err := a.Attach(ctx, backend.ExecRequest{Shell: treeScript + "; wait"})
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		pids := parsePIDs([]byte(readLine(t, bufio.NewReader(p.Stdout()), p)))
		cancel()
		wait(t, p)
		checkGone(t, sb, pids)
	})
}

// readLine reads one line from an attached process's stdout, killing the
// process if none comes within 10 s.
func readLine(t *testing.T, r *bufio.Reader, p backend.Process) string {
	t.Helper()
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := r.ReadString('\n')
		ch <- result{line, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("reading Stdout: got %q, then %v", r.line, r.err)
		}
		return r.line
	case <-time.After(10 * time.Second):
		p.Kill()
		t.Fatal("no line on Stdout within 10 s")
		return ""
	}
}

// wait waits for an attached process, failing t if that takes over 10 s.
func wait(t *testing.T, p backend.Process) (int, error) {
	t.Helper()
	type result struct {
		code int
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		code, err := p.Wait()
		ch <- result{code, err}
	}()
	select {
	case r := <-ch:
		return r.code, r.err
	case <-time.After(10 * time.Second):
		p.Kill()
		t.Fatal("Wait did not return within 10 s")
		return 0, nil
	}
}

func testArchiver(t *testing.T, sb backend.Sandbox) {
	a, ok := backend.As[backend.Archiver](sb)
	if !ok {
		t.Skip("the sandbox is not an Archiver")
	}
	ctx := testCtx(t)
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	// Results are checked through the Exec-based helpers, independent of
	// the Archiver.
	plain := HideCapabilities(sb)
	dir := path.Join(info.WorkDir, "bt-archive")
	mustExec(t, ctx, sb, backend.ExecRequest{Cmd: []string{"mkdir", "-p", dir}})

	small := []byte("from an archive\n")
	bin := randomBytes(100<<10, 4)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"put/", 0o755, nil}, {"put/f.txt", 0o640, small}, {"put/deep/er/g.bin", 0o600, bin}} {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Now(), Typeflag: tar.TypeReg}
		if strings.HasSuffix(f.name, "/") {
			hdr.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.PutArchive(ctx, dir, &buf); err != nil {
		t.Fatalf("PutArchive: %v", err)
	}
	checkOutput(t, "put/f.txt", readFile(t, ctx, plain, path.Join(dir, "put/f.txt")), string(small))
	checkBytes(t, "put/deep/er/g.bin (parents not in the archive)", readFile(t, ctx, plain, path.Join(dir, "put/deep/er/g.bin")), bin)
	if perm := stat(t, ctx, plain, path.Join(dir, "put/f.txt")).Mode().Perm(); perm != 0o640 {
		t.Errorf("put/f.txt has mode %v, want %v", perm, fs.FileMode(0o640))
	}

	got := getArchive(t, ctx, a, path.Join(dir, "put/f.txt"))
	if len(got) != 1 || string(got["f.txt"]) != string(small) {
		t.Errorf("GetArchive of a file = %v, want one entry f.txt", slices.Sorted(maps.Keys(got)))
	}
	got = getArchive(t, ctx, a, path.Join(dir, "put"))
	for _, name := range []string{"put", "put/f.txt", "put/deep/er/g.bin"} {
		if _, ok := got[name]; !ok {
			t.Errorf("GetArchive of a directory = %v, want %s in it", slices.Sorted(maps.Keys(got)), name)
		}
	}
	checkBytes(t, "put/deep/er/g.bin from GetArchive", got["put/deep/er/g.bin"], bin)

	_, err = a.GetArchive(ctx, path.Join(dir, "missing"))
	checkErr(t, "GetArchive of a missing path", err, fs.ErrNotExist)
	err = a.PutArchive(ctx, path.Join(dir, "missing"), bytes.NewReader(buf.Bytes()))
	checkErr(t, "PutArchive into a missing directory", err, fs.ErrNotExist)
}

// getArchive returns the entries of a GetArchive stream by cleaned name
// (directories with no content).
func getArchive(t *testing.T, ctx context.Context, a backend.Archiver, name string) map[string][]byte {
	t.Helper()
	rc, err := a.GetArchive(ctx, name)
	if err != nil {
		t.Fatalf("GetArchive(%q): %v", name, err)
	}
	defer rc.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatalf("GetArchive(%q): reading the stream: %v", name, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("GetArchive(%q): reading %s: %v", name, hdr.Name, err)
		}
		entries[path.Clean(hdr.Name)] = data
	}
}
