package session_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/session"
)

// The session's volumes as OpenSage makes them: shared data that does not
// exist is a warning and /shared starts empty (the launch goes on), and
// /shared and /bash_tools are writable by every user (mode 0777), so tools
// running as another user than root can write there.
func TestSharedVolumesAsOpenSage(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	cfg := nativeConfig(t, `absolute_shared_data_path = "/nonexistent/sbx-seed.tar.gz"
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
user = "65534:65534"
`)
	s, err := session.Launch(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, s)
	want := "sandbox.absolute_shared_data_path: shared data /nonexistent/sbx-seed.tar.gz does not exist: nothing is copied and /shared starts empty, as in OpenSage"
	if !slices.Contains(s.Warnings, want) {
		t.Errorf("session warnings %q, want %q", s.Warnings, want)
	}
	sb, err := s.Sandbox("main")
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Shell: `id -u; stat -c '%a %U' /shared /bash_tools; ls /shared
touch /shared/by-nobody /bash_tools/by-nobody && echo wrote`})
	if err != nil {
		t.Fatal(err)
	}
	if want := "65534\n777 root\n777 root\n" + session.EnvFile + "\nwrote\n"; string(res.Stdout) != want {
		t.Errorf("as user 65534: %q (stderr %q), want %q", res.Stdout, strings.TrimSpace(string(res.Stderr)), want)
	}
}

// Shared data given as a folder that holds only a .tar.gz is unpacked
// into /shared, as OpenSage does with such a seed.
func TestSharedDataLoneArchive(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	seed := t.TempDir()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	body := "unpacked from the seed\n"
	tw.WriteHeader(&tar.Header{Name: "code/hello.txt", Mode: 0o644, Size: int64(len(body))})
	tw.Write([]byte(body))
	tw.Close()
	zw.Close()
	if err := os.WriteFile(filepath.Join(seed, "task.tar.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := nativeConfig(t, `absolute_shared_data_path = "`+seed+`"
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
`)
	s, err := session.Launch(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, s)
	sb, _ := s.Sandbox("main")
	if out := execOut(t, sb, "sh", "-c", "cat /shared/code/hello.txt; ls /shared"); out != body+"bashrc\ncode\n" {
		t.Errorf("in /shared: %q", out)
	}
}
