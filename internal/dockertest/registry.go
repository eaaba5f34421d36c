package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// Registry starts Debian's docker-registry on a free loopback port for the
// duration of t and returns its address (127.0.0.1:PORT). The engine
// treats registries on 127.0.0.0/8 as insecure (plain HTTP) by default, so
// nothing needs configuring. It skips t (fails with SBX_REQUIRE_DOCKER=1)
// when the program is missing (scripts/docker-setup.sh installs it).
func Registry(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		unavailable(t, "docker-registry is not installed (run scripts/docker-setup.sh)")
	}
	dir := t.TempDir()
	// Ask the kernel for a free port, then hand it to the registry; a
	// clash with another process in between shows as a failed start.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(dir, "config.yml")
	err = os.WriteFile(cfg, []byte(fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "data"), addr)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfg)
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting docker-registry: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		logf.Close()
	})
	// Ready when /v2/ answers; bounded, and a registry that died says so.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("docker-registry exited: %s", strings.TrimSpace(string(log)))
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("docker-registry did not answer on %s: %s", addr, strings.TrimSpace(string(log)))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// PushUnique pushes an image to the registry at addr (see Registry) and
// removes it from the engine, so the next pull downloads a layer: base with
// one added layer of random bytes that no other image has. It returns the
// image's reference; the engine's copy is removed again when t ends.
func PushUnique(t testing.TB, cli *client.Client, addr, base string) string {
	t.Helper()
	ctx := context.Background()
	random := make([]byte, 256<<10)
	rand.Read(random)
	name := hex.EncodeToString(random[:6])
	ref := addr + "/sandboxkit-test/unique:" + name

	c, err := cli.ContainerCreate(ctx, &container.Config{Image: base}, nil, nil, nil, "")
	if err != nil {
		t.Fatalf("creating a container of %s: %v", base, err)
	}
	defer cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "unique-" + name, Mode: 0o644, Size: int64(len(random)), ModTime: time.Now()})
	tw.Write(random)
	tw.Close()
	if err := cli.CopyToContainer(ctx, c.ID, "/", &buf, container.CopyToContainerOptions{}); err != nil {
		t.Fatalf("adding a layer: %v", err)
	}
	if _, err := cli.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: ref}); err != nil {
		t.Fatalf("committing %s: %v", ref, err)
	}
	remove := func() {
		if _, err := cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !strings.Contains(err.Error(), "No such image") {
			t.Errorf("removing %s: %v", ref, err)
		}
	}
	t.Cleanup(remove)
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: "e30="}) // "{}": no credentials
	if err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	out, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || bytes.Contains(out, []byte(`"error"`)) {
		t.Fatalf("pushing %s: %v %s", ref, err, out)
	}
	remove()
	return ref
}
