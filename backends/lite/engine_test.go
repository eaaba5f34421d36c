package lite

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// progressLog collects Create's progress statuses.
type progressLog struct {
	mu       sync.Mutex
	statuses []string
}

func (p *progressLog) add(pr backend.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.statuses = append(p.statuses, pr.Status)
}

func (p *progressLog) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.statuses, "\n")
}

// TestEngineImage: an image name this machine's Docker engine holds runs
// on lite with no registry (none is reachable here): exported through the
// Engine API, unpacked under its image ID, and Create says it came from
// the engine. Then the name is served from the cache with the engines
// turned off, and without engines and cache a registry is tried (and
// fails offline), as lite did before it asked engines.
func TestEngineImage(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	inspect, err := cli.ImageInspect(t.Context(), dockertest.BusyboxImage)
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t)
	b := e.open(t)
	var progress progressLog
	spec := e.spec("from-engine")
	spec.Image = dockertest.BusyboxImage
	spec.Progress = progress.add
	sb := create(t, b, spec)
	if out := mustExec(t, sb, "busybox 2>&1 | head -n 1 | cut -d' ' -f1"); out != "BusyBox\n" {
		t.Errorf("in the engine's image: %q", out)
	}
	if got := progress.String(); !strings.Contains(got, "image from the local Docker engine (unix://") {
		t.Errorf("progress %q does not say the image came from the local engine", got)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.ImageDir, cacheKey(inspect.ID), "rootfs", "bin", "busybox")); err != nil {
		t.Errorf("the engine's image is not unpacked under its image ID %s: %v", inspect.ID, err)
	}

	t.Run("cached once the engine is not asked", func(t *testing.T) {
		cfg := e.cfg
		cfg.EngineSocket, cfg.PullPolicy = EngineImagesOff, PullNever
		b2, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		var progress progressLog
		spec := spec
		spec.Name, spec.Progress = "from-cache", progress.add
		mustExec(t, create(t, b2, spec), "true")
		if got := progress.String(); !strings.Contains(got, "image from the image cache (") {
			t.Errorf("progress %q does not say the image came from the cache", got)
		}
	})
	t.Run("no engine and no cache: a registry", func(t *testing.T) {
		cfg := e.cfg
		cfg.EngineSocket, cfg.ImageDir = EngineImagesOff, t.TempDir()
		b3, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer b3.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		spec := spec
		spec.Name, spec.Progress = "from-registry", nil
		if sb, err := b3.Create(ctx, spec); err == nil {
			sb.Destroy(context.Background())
			t.Fatal("Create without engines found the image: want a registry pull, which fails offline")
		} else if !strings.Contains(err.Error(), "pulling image") {
			t.Errorf("Create without engines: %v, want a registry pull's error", err)
		}
	})
}

// An entry with a Dockerfile runs on lite, which builds nothing, when its
// image is on hand (a local engine holds it), as OpenSage uses an image on
// hand before building; otherwise Create refuses, naming the image, the
// Dockerfile and what to do.
func TestBuildImageOnHand(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	e := newTestEnv(t)
	b := e.open(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := e.spec("built-elsewhere")
	spec.Image = dockertest.BusyboxImage
	spec.Build = &backend.Build{ContextDir: dir}
	mustExec(t, create(t, b, spec), "true")

	spec.Image = "sandboxkit-test/never-built:1"
	_, err := b.Create(t.Context(), spec)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), `"sandboxkit-test/never-built:1"`) ||
		!strings.Contains(err.Error(), filepath.Join(dir, "Dockerfile")) || !strings.Contains(err.Error(), "docker build -t sandboxkit-test/never-built:1") {
		t.Errorf("Create of a Dockerfile entry whose image is nowhere: %v", err)
	}
}

// TestEngineImagePodman: the same through Podman's Docker-compatible API
// (scripts/podman-setup.sh's socket), named by engine_socket.
func TestEngineImagePodman(t *testing.T) {
	sock := filepath.Join(cmpOr(os.Getenv("SBX_PODMAN_DIR"), "/run/sandboxkit-podman"), "podman.sock")
	if _, err := os.Stat(sock); err != nil {
		t.Skipf("no Podman service (scripts/podman-setup.sh): %v", err)
	}
	e := newTestEnv(t)
	e.cfg.EngineSocket = "unix://" + sock
	b := e.open(t)
	var progress progressLog
	spec := e.spec("from-podman")
	spec.Image = dockertest.BusyboxImage
	spec.Progress = progress.add
	sb := create(t, b, spec)
	if out := mustExec(t, sb, "busybox 2>&1 | head -n 1 | cut -d' ' -f1"); out != "BusyBox\n" {
		t.Errorf("in Podman's image: %q", out)
	}
	if got := progress.String(); !strings.Contains(got, "image from the local container engine (unix://"+sock+")") {
		t.Errorf("progress %q does not name Podman's socket", got)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestEngineLookupEdges runs the lookup against a stand-in engine on a
// unix socket (the edges a real engine is not made to show): a name it
// does not hold and an image of another platform are left to the
// registry; an engine that fails to export is an error naming it.
func TestEngineLookupEdges(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/images/held:1/json"):
			json.NewEncoder(w).Encode(engineInspect{ID: "sha256:abc", Os: "linux", Architecture: "arm64"})
		case strings.HasPrefix(r.URL.Path, "/images/held:1/get"):
			http.Error(w, "disk on fire", http.StatusInternalServerError)
		default:
			http.Error(w, `{"message":"No such image"}`, http.StatusNotFound)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	s := &imageStore{dir: t.TempDir(), engineSocket: sock, log: slog.New(slog.DiscardHandler)}
	for _, tt := range []struct {
		ref, platform string
		found         bool
		wantErr       string
	}{
		{ref: "missing:1"},
		{ref: "held:1", platform: "linux/amd64"},
		{ref: "held:1", platform: "linux/arm64", wantErr: "disk on fire"},
	} {
		_, from, ok, err := s.fromEngine(t.Context(), tt.ref, tt.platform)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), sock) {
				t.Errorf("%s %s: err %v, want one naming %q and the engine", tt.ref, tt.platform, err, tt.wantErr)
			}
		case err != nil || ok != tt.found:
			t.Errorf("%s %s: ok %v (from %v), err %v; want ok %v", tt.ref, tt.platform, ok, from, err, tt.found)
		}
	}
	if got := localEngines(EngineImagesOff); got != nil {
		t.Errorf("engine_socket off: engines %v", got)
	}
	if got := localEngines(filepath.Join(t.TempDir(), "none.sock")); len(got) != 0 {
		t.Errorf("a socket that does not exist is asked: %v", got)
	}
}
