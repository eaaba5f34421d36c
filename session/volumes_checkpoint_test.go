package session_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/session"
)

// fakeVolumes gives the local backend, which has no volumes (its sandboxes
// are host processes and mount nothing), host-folder stand-ins for them:
// an in-process fake at an edge the local backend cannot host. A volume is
// a folder under dir; a Spec mounting one gets a symlink at the target (a
// host path in the test's temp dir, where [sandbox.paths] point) instead.
// Its sandboxes are Checkpointers that answer with the ref they were given
// (the local backend ignores images), and have no Archiver, so volumes are
// read and written with tar through Exec.
type fakeVolumes struct {
	backend.Backend
	dir string

	mu   sync.Mutex
	vols map[string]backend.VolumeInfo
}

func (b *fakeVolumes) CreateVolume(ctx context.Context, spec backend.VolumeSpec) (string, error) {
	if spec.FromPath != "" {
		return "", fmt.Errorf("fakeVolumes does not seed volumes (FromPath %s)", spec.FromPath)
	}
	if err := os.Mkdir(filepath.Join(b.dir, spec.Name), 0o777); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.vols == nil {
		b.vols = map[string]backend.VolumeInfo{}
	}
	b.vols[spec.Name] = backend.VolumeInfo{Name: spec.Name, Session: spec.Session, Labels: spec.Labels}
	return spec.Name, nil
}

func (b *fakeVolumes) RemoveVolume(ctx context.Context, name string) error {
	b.mu.Lock()
	delete(b.vols, name)
	b.mu.Unlock()
	return os.RemoveAll(filepath.Join(b.dir, name))
}

func (b *fakeVolumes) ListVolumes(ctx context.Context, f backend.Filter) ([]backend.VolumeInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []backend.VolumeInfo
	for _, v := range b.vols {
		if f.Session == "" || v.Session == f.Session {
			out = append(out, v)
		}
	}
	return out, nil
}

func (b *fakeVolumes) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	var keep []backend.Volume
	b.mu.Lock() // the session's sandboxes are created concurrently
	for _, v := range spec.Volumes {
		if v.Type != backend.VolumeNamed {
			keep = append(keep, v)
			continue
		}
		src := filepath.Join(b.dir, v.Source)
		if cur, _ := os.Readlink(v.Target); cur == src {
			continue
		}
		os.Remove(v.Target)
		if err := os.Symlink(src, v.Target); err != nil {
			b.mu.Unlock()
			return nil, err
		}
	}
	b.mu.Unlock()
	spec.Volumes = keep
	sb, err := b.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return checkpointable{sb}, nil
}

type checkpointable struct{ backend.Sandbox }

func (c checkpointable) Checkpoint(ctx context.Context, ref string) (string, error) { return ref, nil }
func (c checkpointable) Unwrap() backend.Sandbox                                    { return c.Sandbox }

// fakeVolumesLauncher returns a launcher on the local backend with
// fakeVolumes, whose session volumes appear at mnt/shared,
// mnt/bash_tools and mnt/sandbox_scripts.
func fakeVolumesLauncher(t *testing.T) (l func() *session.Launcher, fv *fakeVolumes, mnt string) {
	t.Helper()
	dir := t.TempDir()
	mnt = filepath.Join(dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "vols"), 0o755))
	reg := config.NewRegistry()
	reg.Register(local.Factory)
	cfg, err := reg.ParseConfig(fmt.Appendf(nil, `
[sandbox]
backend = "local"
[sandbox.local]
state_dir = "state"
[sandbox.paths]
shared = %q
bash_tools = %q
sandbox_scripts = %q
[sandbox.sandboxes.box]
[sandbox.sandboxes.other]
`, mnt+"/shared", mnt+"/bash_tools", mnt+"/sandbox_scripts"), filepath.Join(dir, "sandbox.toml"))
	require.NoError(t, err)
	b, err := cfg.Open(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	fv = &fakeVolumes{Backend: b, dir: filepath.Join(dir, "vols")}
	return func() *session.Launcher { return &session.Launcher{Config: cfg, Backend: fv} }, fv, mnt
}

// writeAgentData fills dir (a session's /shared) with what an agent
// leaves: a nested folder, an executable, a private file, a symlink, a
// file of another owner (as root).
const writeAgentData = `set -e
cd "$1"
mkdir -p notes/deep
echo found > notes/deep/finding.txt
printf '#!/bin/sh\necho run\n' > run.sh
chmod 750 run.sh
echo secret > private
chmod 600 private
ln -s notes/deep/finding.txt latest
if [ "$(id -u)" = 0 ]; then echo theirs > owned; chown 1234:2345 owned; fi
`

// agentDataState describes what writeAgentData wrote, as the sandbox sees
// it: mode, type and owner of each path, the symlink's target, the files'
// contents.
const agentDataState = `cd "$1"
stat -c '%n %a %F' notes notes/deep notes/deep/finding.txt run.sh private
readlink latest
cat latest private
./run.sh
if [ "$(id -u)" = 0 ]; then stat -c '%n %u:%g' owned; cat owned; fi
`

func shellOut(t *testing.T, sb backend.Sandbox, script string, args ...string) string {
	t.Helper()
	return execOut(t, sb, append([]string{"sh", "-c", script, "sh"}, args...)...)
}

// On the local backend (with stand-in volumes, see fakeVolumes): files an
// agent wrote into /shared survive Checkpoint, Destroy and a launch from
// the manifest, with their modes, owners and symlinks; the archives are
// the only trace of the old volume.
func TestCheckpointVolumesLocal(t *testing.T) {
	ctx := context.Background()
	newL, fv, mnt := fakeVolumesLauncher(t)
	shared := mnt + "/shared"
	s, err := newL().Launch(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Destroy(context.Background()) })
	for _, w := range s.Warnings {
		require.NotContains(t, w, "no shared volumes")
	}
	box, err := s.Sandbox("box")
	require.NoError(t, err)
	shellOut(t, box, writeAgentData, shared)
	execOut(t, box, "sh", "-c", "echo tool > "+mnt+"/bash_tools/mytool")
	want := shellOut(t, box, agentDataState, shared)
	require.Contains(t, want, "run.sh 750 regular file", "the data as written")

	dir := t.TempDir()
	m, err := s.Checkpoint(ctx, filepath.Join(dir, "cp.json"))
	require.NoError(t, err)
	assert.Equal(t, session.ManifestVersion, m.Version)
	assert.Equal(t, []string{"bash_tools", "shared"}, slices.Sorted(maps.Keys(m.Volumes)), "the read-write volumes, not sandbox_scripts")
	assert.Equal(t, shared, m.Volumes["shared"].Target)
	assert.Equal(t, []string{"cp.bash-tools.tar", "cp.json", "cp.shared.tar"}, dirNames(t, dir), "no temporary files left")
	require.NoError(t, s.Destroy(ctx))
	vols, _ := os.ReadDir(fv.dir)
	require.Empty(t, vols, "the old session's volumes are gone")

	loaded, err := session.LoadManifest(filepath.Join(dir, "cp.json"))
	require.NoError(t, err)
	assert.Equal(t, m.Volumes, loaded.Volumes)
	l2 := newL()
	l2.Manifest = loaded
	s2, err := l2.Launch(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s2.Destroy(context.Background()) })
	other, err := s2.Sandbox("other")
	require.NoError(t, err)
	assert.Equal(t, want, shellOut(t, other, agentDataState, shared), "the restored /shared")
	assert.Equal(t, "tool\n", execOut(t, other, "cat", mnt+"/bash_tools/mytool"), "the restored /bash_tools")
	assert.Contains(t, execOut(t, other, "cat", shared+"/"+session.EnvFile), "session "+s2.ID,
		"the env file is the new session's, written after the restore")
}

// A checkpoint that fails half-way (a volume cannot be read) leaves the
// folder as it was: the earlier checkpoint's files, byte for byte, and no
// temporary ones.
func TestCheckpointVolumesFailureLeavesNothing(t *testing.T) {
	ctx := context.Background()
	newL, fv, mnt := fakeVolumesLauncher(t)
	s, err := newL().Launch(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Destroy(context.Background()) })
	box, _ := s.Sandbox("box")
	execOut(t, box, "sh", "-c", "echo one > "+mnt+"/shared/a")
	dir := t.TempDir()
	path := filepath.Join(dir, "cp.json")
	_, err = s.Checkpoint(ctx, path)
	require.NoError(t, err)
	before := dirContents(t, dir)

	execOut(t, box, "sh", "-c", "echo two > "+mnt+"/shared/a")
	// bash_tools is read after shared: its folder vanishing fails the
	// checkpoint once shared's archive is written.
	require.NoError(t, os.RemoveAll(filepath.Join(fv.dir, "sbx-"+s.ID+"-bash-tools")))
	_, err = s.Checkpoint(ctx, path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "volume bash_tools")
	assert.Contains(t, err.Error(), mnt+"/bash_tools")
	assert.Equal(t, before, dirContents(t, dir), "the earlier checkpoint is untouched")
}

// A manifest of the first format (images only, no "version") still
// launches, and a manifest from a newer format is refused by name.
func TestManifestVersions(t *testing.T) {
	ctx := context.Background()
	newL, _, mnt := fakeVolumesLauncher(t)
	dir := t.TempDir()
	v1 := filepath.Join(dir, "v1.json")
	require.NoError(t, os.WriteFile(v1, []byte(`{
  "session": "old",
  "backend": "local",
  "created_at": "2026-01-02T03:04:05Z",
  "sandboxes": {"box": {"type": "box", "image": "old-image"}}
}
`), 0o644))
	m, err := session.LoadManifest(v1)
	require.NoError(t, err)
	assert.Equal(t, 0, m.Version)
	assert.Empty(t, m.Volumes)
	l := newL()
	l.Manifest = m
	s, err := l.Launch(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Destroy(context.Background()) })
	box, _ := s.Sandbox("box")
	info, err := box.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, "old-image", info.Image, "the sandbox starts from the manifest's image")
	assert.Equal(t, session.EnvFile+"\n", execOut(t, box, "ls", mnt+"/shared"), "a fresh /shared")

	v9 := filepath.Join(dir, "v9.json")
	require.NoError(t, os.WriteFile(v9, []byte(`{"version": 9, "session": "x", "sandboxes": {}}`), 0o644))
	_, err = session.LoadManifest(v9)
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "format version 9 is newer")
}

// A launch from a manifest whose volume archive is damaged, missing or
// escapes the volume fails before the backend is contacted, naming the
// volume and the archive.
func TestCheckpointVolumeArchiveRefused(t *testing.T) {
	var good bytes.Buffer
	tw := tar.NewWriter(&good)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "a", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
	tw.Write([]byte("x"))
	require.NoError(t, tw.Close())
	var escaping bytes.Buffer
	tw = tar.NewWriter(&escaping)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "../evil", Mode: 0o644, Typeflag: tar.TypeReg}))
	require.NoError(t, tw.Close())

	for name, tc := range map[string]struct {
		data   []byte // nil: no file
		sumOf  []byte // what the manifest's checksum is of
		want   string
		target error
	}{
		"changed":   {data: append(bytes.Clone(good.Bytes()[:512]), bytes.Repeat([]byte{0}, 1024)...), sumOf: good.Bytes(), want: "the manifest says", target: backend.ErrInvalidConfig},
		"not a tar": {data: []byte("garbage garbage"), sumOf: []byte("garbage garbage"), want: "not a readable tar archive", target: backend.ErrInvalidConfig},
		"escapes":   {data: escaping.Bytes(), sumOf: escaping.Bytes(), want: `entry "../evil" points outside the volume`, target: backend.ErrInvalidConfig},
		"missing":   {sumOf: good.Bytes(), want: "no such file", target: fs.ErrNotExist},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			archive := filepath.Join(dir, "cp.shared.tar")
			if tc.data != nil {
				require.NoError(t, os.WriteFile(archive, tc.data, 0o644))
			}
			sum := sha256.Sum256(tc.sumOf)
			path := filepath.Join(dir, "cp.json")
			require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, `{"version": 2, "session": "x", "backend": "local", "sandboxes": {},
"volumes": {"shared": {"target": "/shared", "archive": "cp.shared.tar", "sha256": %q}}}`, hex.EncodeToString(sum[:])), 0o644))
			m, err := session.LoadManifest(path)
			require.NoError(t, err)
			cfg := nativeConfig(t, "[sandbox.sandboxes.main]\n")
			_, err = (&session.Launcher{Config: cfg, Backend: unreachable{}, Manifest: m}).Launch(context.Background())
			require.ErrorIs(t, err, tc.target)
			assert.Contains(t, err.Error(), "checkpoint volume shared (/shared): "+archive+": ")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A checkpoint holding /shared does not launch on a backend whose session
// has no volumes (plain local): the agent's data would be dropped.
func TestCheckpointVolumesNeedVolumes(t *testing.T) {
	reg := config.NewRegistry()
	reg.Register(local.Factory)
	dir := t.TempDir()
	cfg, err := reg.ParseConfig([]byte("[sandbox]\nbackend = \"local\"\n[sandbox.local]\nstate_dir = \"state\"\n[sandbox.sandboxes.box]\n"), filepath.Join(dir, "sandbox.toml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cp.shared.tar"), make([]byte, 1024), 0o644))
	sum := sha256.Sum256(make([]byte, 1024))
	m := &session.Manifest{Version: 2, Sandboxes: map[string]session.ManifestSandbox{}, Backend: "native",
		Volumes: map[string]session.ManifestVolume{"shared": {Target: "/shared", Archive: filepath.Join(dir, "cp.shared.tar"), SHA256: hex.EncodeToString(sum[:])}}}
	_, err = (&session.Launcher{Config: cfg, Manifest: m}).Launch(context.Background())
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "the checkpoint holds the volume shared (/shared), which the local backend's session does not have")
}

// On the native backend: /shared's files, with modes, owners and symlinks,
// come back in a session launched from the checkpoint (GetArchive and
// PutArchive through the engine).
func TestCheckpointVolumesNative(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	cfg := nativeConfig(t, `
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, _ := newLauncher(t, cli, cfg)
	s, err := l.Launch(ctx)
	require.NoError(t, err)
	destroyOnCleanup(t, s)
	main, _ := s.Sandbox("main")
	shellOut(t, main, writeAgentData, "/shared")
	want := shellOut(t, main, agentDataState, "/shared")
	require.Contains(t, want, "owned 1234:2345", "the data as written")

	path := filepath.Join(t.TempDir(), "manifest.json")
	m, err := s.Checkpoint(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, ref := range m.Images() {
			cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true})
		}
	})
	require.NoError(t, s.Destroy(ctx))
	loaded, err := session.LoadManifest(path)
	require.NoError(t, err)
	require.Contains(t, loaded.Volumes, "shared")

	l2, _ := newLauncher(t, cli, cfg)
	l2.Manifest = loaded
	s2, err := l2.Launch(ctx)
	require.NoError(t, err)
	destroyOnCleanup(t, s2)
	main2, _ := s2.Sandbox("main")
	assert.Equal(t, want, shellOut(t, main2, agentDataState, "/shared"))
	assert.Contains(t, execOut(t, main2, "cat", "/shared/"+session.EnvFile), "session "+s2.ID)
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range dirNames(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		out[n] = strings.Clone(string(b))
	}
	return out
}
