package lite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// OpenSage's agentdocker-lite runs Docker images, and a machine that has
// them usually has them in a local engine. So an image name (not a source
// with a transport prefix) is looked up in the local engines' image stores
// first, through the Engine API that Docker and Podman both serve on a unix
// socket, and exported from there (GET /images/NAME/get, docker save's
// archive); only a name no engine holds is pulled from a registry.

// EngineImagesOff is [sandbox.lite] engine_socket's value that turns the
// lookup in local engines off.
const EngineImagesOff = "off"

// localEngine is a container engine's API on a unix socket.
type localEngine struct {
	name   string // "Docker" or "Podman", for messages
	socket string // the socket's path
}

func (e localEngine) String() string {
	return fmt.Sprintf("the local %s engine (unix://%s)", e.name, e.socket)
}

// localEngines lists the engines to ask, in order: setting (engine_socket:
// a socket path or unix:// URL) alone when set; else DOCKER_HOST when it is
// a unix socket, Docker's default socket, and Podman's rootful and rootless
// sockets. Sockets that do not exist are left out.
func localEngines(setting string) []localEngine {
	if setting == EngineImagesOff {
		return nil
	}
	var candidates []localEngine
	if setting != "" {
		candidates = append(candidates, localEngine{"container", strings.TrimPrefix(setting, "unix://")})
	} else {
		if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
			candidates = append(candidates, localEngine{"Docker", h})
		}
		candidates = append(candidates, localEngine{"Docker", "/var/run/docker.sock"}, localEngine{"Podman", "/run/podman/podman.sock"})
		if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
			candidates = append(candidates, localEngine{"Podman", filepath.Join(x, "podman", "podman.sock")})
		}
	}
	var out []localEngine
	seen := map[string]bool{}
	for _, e := range candidates {
		real, err := filepath.EvalSymlinks(e.socket)
		if err != nil || seen[real] {
			continue
		}
		if fi, err := os.Stat(real); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		seen[real] = true
		out = append(out, e)
	}
	return out
}

func (e localEngine) client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.socket)
		},
		DisableKeepAlives: true,
	}}
}

// engineInspect is what the Engine API's image inspect says that matters
// here.
type engineInspect struct {
	ID           string `json:"Id"`
	Os           string `json:"Os"`
	Architecture string `json:"Architecture"`
	Variant      string `json:"Variant"`
}

// errNoSuchImage: the engine answered and does not hold the name.
var errNoSuchImage = errors.New("no such image")

// inspect asks the engine for ref's image. The engine's own errors come
// back as they are; errNoSuchImage when it does not hold ref.
func (e localEngine) inspect(ctx context.Context, ref string) (engineInspect, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://engine/images/"+url.PathEscape(ref)+"/json", nil)
	if err != nil {
		return engineInspect{}, err
	}
	resp, err := e.client().Do(req)
	if err != nil {
		return engineInspect{}, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return engineInspect{}, errNoSuchImage
	case resp.StatusCode != http.StatusOK:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return engineInspect{}, fmt.Errorf("image inspect: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	var out engineInspect
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return engineInspect{}, fmt.Errorf("image inspect: %w", err)
	}
	return out, nil
}

// save writes the engine's archive of ref (docker save's format) to file.
func (e localEngine) save(ctx context.Context, ref, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://engine/images/"+url.PathEscape(ref)+"/get", nil)
	if err != nil {
		return err
	}
	resp, err := e.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("image save: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("image save: %w", err)
	}
	return nil
}

// platformMatches reports whether an engine's image is of platform
// ("" : this machine's, which the engine's images are made for).
func (i engineInspect) platformMatches(platform string) bool {
	if platform == "" {
		return true
	}
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		return false
	}
	return p.OS == i.Os && p.Architecture == i.Architecture && (p.Variant == "" || p.Variant == i.Variant)
}

// fromEngine returns ref from the first local engine that holds it (of
// platform), unpacked into the cache, and which engine that was; ok false
// when none does (or none answers: a stopped engine is not an error, the
// registry is asked next).
func (s *imageStore) fromEngine(ctx context.Context, ref, platform string) (img *image, from localEngine, ok bool, err error) {
	for _, e := range localEngines(s.engineSocket) {
		info, err := e.inspect(ctx, ref)
		if err != nil {
			if !errors.Is(err, errNoSuchImage) {
				s.log.Debug("asking a local engine for an image", "engine", e.String(), "image", ref, "err", err)
			}
			continue
		}
		if !info.platformMatches(platform) {
			s.log.Info("a local engine holds the image for another platform; not using it", "engine", e.String(),
				"image", ref, "platform", platform, "engine platform", info.Os+"/"+info.Architecture)
			continue
		}
		img, err := s.engineImage(ctx, e, ref, info.ID)
		return img, e, err == nil, err
	}
	return nil, localEngine{}, false, nil
}

// engineImage unpacks the image the engine knows by id (ref's) into the
// cache, exporting it only when no earlier export of that id is there.
// The name is recorded as a registry tag would be, so with pull_policy
// "missing" it keeps working once the engine is gone.
func (s *imageStore) engineImage(ctx context.Context, e localEngine, ref, id string) (*image, error) {
	idFile := filepath.Join(s.dir, "refs", hashString("engine:"+id))
	if key, err := os.ReadFile(idFile); err == nil {
		if img, err := s.cached(string(key)); err == nil {
			s.recordRef(ref, string(key))
			return img, nil
		}
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(s.dir, ".engine-save-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	archive := filepath.Join(tmp, "image.tar")
	s.log.Info("exporting image from a local engine", "engine", e.String(), "image", ref, "id", id)
	if err := e.save(ctx, ref, archive); err != nil {
		return nil, fmt.Errorf("%w: image %q from %s: %v", backend.ErrUnavailable, ref, e, err)
	}
	var tag *name.Tag
	if t, err := name.NewTag(ref); err == nil {
		tag = &t
	}
	v1img, err := tarball.ImageFromPath(archive, tag)
	if err != nil && tag != nil {
		v1img, err = tarball.ImageFromPath(archive, nil) // an archive naming the image otherwise
	}
	if err != nil {
		return nil, imageErr(ref, fmt.Errorf("reading %s's archive: %w", e, err))
	}
	img, err := s.unpack(ref, v1img)
	if err != nil {
		return nil, err
	}
	key := cacheKey(img.config.Digest)
	if err := statedir.WriteFileAtomic(idFile, []byte(key)); err != nil {
		s.log.Warn("recording an image's engine ID failed", "image", ref, "err", err)
	}
	s.recordRef(ref, key)
	return img, nil
}

// recordRef remembers that name ref is the cached image key, as a pull
// does.
func (s *imageStore) recordRef(ref, key string) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return
	}
	refFile := filepath.Join(s.dir, "refs", hashString(r.Name()))
	if old, err := os.ReadFile(refFile); err == nil && string(old) == key {
		return
	}
	if err := statedir.WriteFileAtomic(refFile, []byte(key)); err != nil {
		s.log.Warn("recording an image's digest failed", "image", ref, "err", err)
	}
}

// onHand checks that image ref, which a Spec's Build would make, is on hand
// without a build or a pull: held by a local engine, or in the cache from
// an earlier engine export or pull. lite builds no images; OpenSage uses an
// image on hand before building it, so an entry with a Dockerfile runs when
// its image is here.
func (s *imageStore) onHand(ctx context.Context, ref, platform string, build *backend.Build) error {
	if _, ok := s.aliases[ref]; ok {
		return nil // [sandbox.lite.images] names its source
	}
	if ref != "" && !strings.Contains(ref, ":/") && !filepath.IsAbs(ref) {
		if _, _, ok, err := s.fromEngine(ctx, ref, platform); ok || err != nil {
			return err
		}
		if r, err := name.ParseReference(ref); err == nil && platform == "" {
			if key, err := os.ReadFile(filepath.Join(s.dir, "refs", hashString(r.Name()))); err == nil {
				if _, err := s.cached(string(key)); err == nil {
					return nil
				}
			}
		}
	}
	df := build.Dockerfile
	if df == "" {
		df = filepath.Join(build.ContextDir, "Dockerfile")
	}
	return fmt.Errorf("%w: the lite backend builds no images, and neither a local engine nor its image cache holds %q, which Dockerfile %s would build: build it with docker build -t %s (or podman build) and launch again, or name an image",
		errors.ErrUnsupported, ref, df, ref)
}
