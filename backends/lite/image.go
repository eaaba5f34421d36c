package lite

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
	"github.com/sandboxkit/sandboxkit/internal/tartree"
)

// Image source prefixes (the transport names skopeo uses).
const (
	srcDir           = "dir:"
	srcDockerArchive = "docker-archive:"
	srcOCILayout     = "oci:"
	srcOCIArchive    = "oci-archive:"
	srcRegistry      = "docker://"
)

// imageConfig is what a sandbox takes from its image's config.
type imageConfig struct {
	// Digest is the image ID (the digest of its config), "" for a folder.
	Digest     string   `json:"digest,omitempty"`
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"workdir,omitempty"`
	User       string   `json:"user,omitempty"`
	// HasConfig is false for a folder, which has no entrypoint or env.
	HasConfig bool `json:"has_config"`
}

// image is an image ready to be an overlay's lower layer.
type image struct {
	rootfs string
	config imageConfig
	// source says where resolve found a name with no transport prefix:
	// a local engine (engine.go), the cache of earlier pulls, or a
	// registry ("" for the other sources, which name themselves).
	source string
}

// imageStore unpacks images into a cache keyed by image ID: each image is
// unpacked once, however many sandboxes use it and whatever names it is
// reached by.
type imageStore struct {
	dir        string
	aliases    map[string]string
	insecure   []string
	pullPolicy string
	// engineSocket is [sandbox.lite] engine_socket (see localEngines).
	engineSocket string
	log          *slog.Logger

	mu    sync.Mutex
	locks map[string]*sync.Mutex // per image ID, held while unpacking
}

func (s *imageStore) lock(key string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locks == nil {
		s.locks = map[string]*sync.Mutex{}
	}
	l, ok := s.locks[key]
	if !ok {
		l = &sync.Mutex{}
		s.locks[key] = l
	}
	return l
}

// resolve returns the unpacked image ref names, unpacking it first when
// the cache lacks it. platform ("os/arch[/variant]", "" for this machine's)
// selects the variant of a registry image to pull; other sources are what
// their files are, so a platform there is refused.
func (s *imageStore) resolve(ctx context.Context, ref, platform string) (*image, error) {
	if alias, ok := s.aliases[ref]; ok {
		ref = alias
	}
	registry := strings.HasPrefix(ref, srcRegistry) || !(strings.HasPrefix(ref, srcDir) ||
		strings.HasPrefix(ref, srcDockerArchive) || strings.HasPrefix(ref, srcOCILayout) ||
		strings.HasPrefix(ref, srcOCIArchive) || strings.HasPrefix(ref, srcSnapshot) || filepath.IsAbs(ref))
	if platform != "" && !registry {
		return nil, fmt.Errorf("%w: platform %q: the lite backend selects a platform only when pulling from a registry, and image %q is local files (remove platform or name a registry image)",
			errors.ErrUnsupported, platform, ref)
	}
	switch {
	case strings.HasPrefix(ref, srcDir):
		return dirImage(strings.TrimPrefix(ref, srcDir))
	case strings.HasPrefix(ref, srcDockerArchive):
		return s.fromDockerArchive(strings.TrimPrefix(ref, srcDockerArchive))
	case strings.HasPrefix(ref, srcOCILayout):
		p, tag := splitLayoutRef(strings.TrimPrefix(ref, srcOCILayout))
		return s.fromOCILayout(p, tag)
	case strings.HasPrefix(ref, srcOCIArchive):
		p, tag := splitLayoutRef(strings.TrimPrefix(ref, srcOCIArchive))
		return s.fromOCIArchive(p, tag)
	case strings.HasPrefix(ref, srcSnapshot):
		return s.snapshot(strings.TrimPrefix(ref, srcSnapshot))
	case strings.HasPrefix(ref, srcRegistry):
		return s.fromRegistry(ctx, strings.TrimPrefix(ref, srcRegistry), platform)
	case filepath.IsAbs(ref):
		return s.fromPath(ref)
	}
	// A bare name: a local engine's image before a registry's, unless
	// pull_policy "always" asks for the registry's.
	if s.pullPolicy != PullAlways {
		img, e, ok, err := s.fromEngine(ctx, ref, platform)
		if err != nil {
			return nil, err
		}
		if ok {
			img.source = e.String()
			return img, nil
		}
	}
	return s.fromRegistry(ctx, ref, platform)
}

// pullPlatform is the platform to pull: "os/arch[/variant]", else linux on
// this machine's architecture.
func pullPlatform(platform string) (v1.Platform, error) {
	if platform == "" {
		return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, nil
	}
	p, err := v1.ParsePlatform(platform)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("%w: platform %q: want os/arch[/variant], e.g. linux/arm64", backend.ErrInvalidConfig, platform)
	}
	return *p, nil
}

// splitLayoutRef splits "/path/to/layout:tag" (the tag has no slash).
func splitLayoutRef(s string) (string, string) {
	if i := strings.LastIndexByte(s, ':'); i > 0 && !strings.Contains(s[i+1:], "/") {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// fromPath guesses the kind of an absolute path: an OCI layout folder, a
// root file system folder, or an archive (docker save or OCI).
func (s *imageStore) fromPath(p string) (*image, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, imageErr(p, err)
	}
	if fi.IsDir() {
		if _, err := os.Stat(filepath.Join(p, "oci-layout")); err == nil {
			return s.fromOCILayout(p, "")
		}
		return dirImage(p)
	}
	isOCI, err := tarHas(p, "oci-layout")
	if err != nil {
		return nil, imageErr(p, err)
	}
	if isOCI {
		return s.fromOCIArchive(p, "")
	}
	return s.fromDockerArchive(p)
}

func imageErr(ref string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: image %q: %v", backend.ErrNotFound, ref, err)
	}
	return fmt.Errorf("image %q: %w", ref, err)
}

// dirImage uses a root file system folder as it is, as the lower layer.
func dirImage(p string) (*image, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("%w: image %q: a folder image needs an absolute path", backend.ErrInvalidConfig, srcDir+p)
	}
	if strings.ContainsAny(p, ",:") {
		return nil, fmt.Errorf("%w: image %q: the path may not contain ',' or ':' (overlayfs mount options cannot hold them)", backend.ErrInvalidConfig, srcDir+p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, imageErr(srcDir+p, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: image %q: not a folder", backend.ErrInvalidConfig, srcDir+p)
	}
	return &image{rootfs: filepath.Clean(p)}, nil
}

func (s *imageStore) fromDockerArchive(p string) (*image, error) {
	img, err := tarball.ImageFromPath(p, nil)
	if err != nil {
		return nil, imageErr(srcDockerArchive+p, err)
	}
	return s.unpack(srcDockerArchive+p, img)
}

func (s *imageStore) fromOCILayout(p, tag string) (*image, error) {
	lp, err := layout.FromPath(p)
	if err != nil {
		return nil, imageErr(srcOCILayout+p, err)
	}
	img, err := layoutImage(lp, tag)
	if err != nil {
		return nil, imageErr(srcOCILayout+p, err)
	}
	return s.unpack(srcOCILayout+p, img)
}

// layoutImage picks the image of an OCI layout: the one annotated with tag,
// or the only one (for this platform, when the layout holds an index).
func layoutImage(lp layout.Path, tag string) (v1.Image, error) {
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var candidates []v1.Descriptor
	for _, d := range im.Manifests {
		if tag == "" || d.Annotations["org.opencontainers.image.ref.name"] == tag {
			candidates = append(candidates, d)
		}
	}
	if len(candidates) != 1 {
		return nil, fmt.Errorf("the layout holds %d images named %q (want exactly one; name one with :TAG)", len(candidates), tag)
	}
	d := candidates[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, c := range cm.Manifests {
			if c.Platform != nil && c.Platform.OS == "linux" && c.Platform.Architecture == runtime.GOARCH {
				return child.Image(c.Digest)
			}
		}
		return nil, fmt.Errorf("the layout's index has no image for linux/%s", runtime.GOARCH)
	}
	return idx.Image(d.Digest)
}

// fromOCIArchive unpacks the archive's layout to a temporary folder first.
func (s *imageStore) fromOCIArchive(p, tag string) (*image, error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(s.dir, ".oci-archive-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	f, err := os.Open(p)
	if err != nil {
		return nil, imageErr(srcOCIArchive+p, err)
	}
	err = tartree.Extract(f, tmp, nil)
	f.Close()
	if err != nil {
		return nil, imageErr(srcOCIArchive+p, err)
	}
	lp, err := layout.FromPath(tmp)
	if err != nil {
		return nil, imageErr(srcOCIArchive+p, err)
	}
	img, err := layoutImage(lp, tag)
	if err != nil {
		return nil, imageErr(srcOCIArchive+p, err)
	}
	return s.unpack(srcOCIArchive+p, img)
}

// fromRegistry pulls ref, of platform (see resolve). With pull policy
// "missing", a ref seen before (for the same platform) is served from the
// cache without asking the registry.
func (s *imageStore) fromRegistry(ctx context.Context, ref, platform string) (*image, error) {
	plat, err := pullPlatform(platform)
	if err != nil {
		return nil, err
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: image %q: %v (use dir:/path, docker-archive:/path.tar, oci:/path or a registry reference)", backend.ErrInvalidConfig, ref, err)
	}
	if slices.Contains(s.insecure, r.Context().RegistryStr()) {
		if r, err = name.ParseReference(ref, name.Insecure); err != nil {
			return nil, fmt.Errorf("%w: image %q: %v", backend.ErrInvalidConfig, ref, err)
		}
	}
	refKey := r.Name()
	if platform != "" {
		refKey += "@" + plat.String()
	}
	refFile := filepath.Join(s.dir, "refs", hashString(refKey))
	if s.pullPolicy != PullAlways {
		if key, err := os.ReadFile(refFile); err == nil {
			if img, err := s.cached(string(key)); err == nil {
				img.source = "the image cache (" + s.dir + ")"
				return img, nil
			}
		}
	}
	if s.pullPolicy == PullNever {
		return nil, fmt.Errorf("%w: image %q is in no local engine, not in the cache, and [sandbox.lite] pull_policy is \"never\"", backend.ErrNotFound, ref)
	}
	s.log.Info("pulling image", "image", r.Name())
	img, err := remote.Image(r,
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(plat))
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("%w: image %q: the registry has no such image: %v", backend.ErrNotFound, r.Name(), err)
		}
		return nil, fmt.Errorf("%w: pulling image %q: %v", backend.ErrUnavailable, r.Name(), err)
	}
	out, err := s.unpack(r.Name(), img)
	if err != nil {
		return nil, err
	}
	if err := statedir.WriteFileAtomic(refFile, []byte(cacheKey(out.config.Digest))); err != nil {
		s.log.Warn("recording an image's digest failed", "image", r.Name(), "err", err)
	}
	out.source = "the registry " + r.Context().RegistryStr()
	return out, nil
}

func hashString(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// cacheKey is the cache folder name of an image ID ("sha256:abc" ->
// "sha256-abc").
func cacheKey(digest string) string { return strings.ReplaceAll(digest, ":", "-") }

// cached returns the unpacked image in cache folder key.
func (s *imageStore) cached(key string) (*image, error) {
	dir := filepath.Join(s.dir, key)
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var cfg imageConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	return &image{rootfs: filepath.Join(dir, "rootfs"), config: cfg}, nil
}

// unpack flattens img's layers (applying whiteouts) into the cache, once,
// keyed by its image ID.
func (s *imageStore) unpack(ref string, img v1.Image) (*image, error) {
	digest, err := img.ConfigName()
	if err != nil {
		return nil, imageErr(ref, err)
	}
	return s.unpackAs(ref, img, cacheKey(digest.String()), digest.String())
}

// unpackAs flattens img's layers (applying whiteouts) into the image
// folder key, unless it is there already, recording id as its image ID
// (which a sandbox made from it records as its ImageDigest; cacheKey(id)
// must be key).
func (s *imageStore) unpackAs(ref string, img v1.Image, key, id string) (*image, error) {
	if out, err := s.cached(key); err == nil {
		return out, nil
	}
	l := s.lock(key)
	l.Lock()
	defer l.Unlock()
	if out, err := s.cached(key); err == nil {
		return out, nil
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, imageErr(ref, err)
	}
	cfg := imageConfig{
		Digest: id, HasConfig: true,
		Env: cf.Config.Env, Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd,
		WorkingDir: cf.Config.WorkingDir, User: cf.Config.User,
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(s.dir, ".unpack-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, err
	}
	s.log.Info("unpacking image", "image", ref, "digest", id)
	rc := mutate.Extract(img)
	var skipped []string
	err = tartree.Extract(rc, rootfs, &skipped)
	if err == nil {
		// Extract ends its tar even when a layer fails, and says so
		// only after that end.
		_, err = io.Copy(io.Discard, rc)
	}
	rc.Close()
	if err != nil {
		return nil, imageErr(ref, fmt.Errorf("unpacking: %w", err))
	}
	if len(skipped) > 0 {
		s.log.Warn("image entries not unpacked (device nodes)", "image", ref, "count", len(skipped), "first", skipped[0])
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), data, 0o644); err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, key)
	if err := os.Rename(tmp, dir); err != nil {
		// Another process unpacked it meanwhile: use theirs.
		if out, cerr := s.cached(key); cerr == nil {
			return out, nil
		}
		return nil, imageErr(ref, err)
	}
	return s.cached(key)
}

// tarHas reports whether the tar file at p has an entry named name at its
// top level.
func tarHas(p, name string) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if path.Clean(hdr.Name) == name {
			return true, nil
		}
	}
}
