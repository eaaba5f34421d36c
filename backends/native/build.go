package native

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/tartree"
)

// Builds use the engine's classic builder through the plain build API (no
// BuildKit session, no docker CLI, no registry), which Docker Engine 20.10
// and later and Podman's compatible API all serve. The context is streamed
// as a tar, honouring .dockerignore. The image's layer cache makes a
// rebuild of an unchanged Dockerfile a series of cache hits, so a Create
// with a Build rebuilds an image this backend built; concurrent builds of
// one tag in this process run one after the other.
//
// An image it did not build is taken as OpenSage takes it: Spec.Image on
// the engine is used as it is, else pulled, and the Dockerfile is the
// fallback (existingBuildImage), so a user who has OpenSage's images needs
// no rebuild and no network. A failed build removes the untagged images
// its finished steps left (nothing would label them for sbx gc).

// labelDockerfile on a built image records the Dockerfile it came from.
const labelDockerfile = "sandboxkit.native.dockerfile"

// buildTailLines is how much of a failing step's output its error keeps.
const buildTailLines = 20

var (
	// Docker's classic builder writes "Step 1/4 : FROM x", Podman's
	// (buildah) "STEP 1/4: FROM x".
	stepLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?i:step) (\d+)/(\d+) ?: (.*)$`) })
	// The classic builder colours a step's stderr.
	ansiEscape = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\x1b\[[0-9;]*[a-zA-Z]`) })
	// The short image ID after a classic builder's step: "---> 3f2a9c1b".
	imageIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{12,64}$`) })
)

// buildLocks holds one mutex per tag.
type buildLocks struct{ m sync.Map }

func (l *buildLocks) lock(tag string) func() {
	mu, _ := l.m.LoadOrStore(tag, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// build builds spec.Build into the image spec.Image.
func (b *Backend) build(ctx context.Context, spec backend.Spec, report func(backend.Progress)) error {
	bs, tag := spec.Build, spec.Image
	contextDir, dockerfile, dfData, err := readDockerfile(bs)
	if err != nil {
		return err
	}
	policy := cmp(b.cfg.PullPolicy, PullMissing)
	if policy == PullNever {
		if err := b.checkBaseImages(ctx, dockerfile, dfData); err != nil {
			return err
		}
	}
	pr, dfName, tarErr, err := contextTar(contextDir, dockerfile, dfData)
	if err != nil {
		return err
	}
	defer pr.Close() // unblocks the writer if the engine stops reading

	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// Each label costs the classic builder a step of its own, appended to
	// the Dockerfile's: keep them few.
	labels[backend.LabelBackend] = Name
	labels[labelDockerfile] = dockerfile
	args := map[string]*string{}
	for k, v := range bs.Args {
		args[k] = &v
	}

	defer b.builds.lock(tag)()
	b.log.Info("building image", "image", tag, "dockerfile", dockerfile)
	resp, err := b.cli.ImageBuild(ctx, pr, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  dfName,
		BuildArgs:   args,
		Labels:      labels,
		Remove:      true,
		ForceRemove: true, // no intermediate containers left after a failed step
		PullParent:  policy == PullAlways,
		Version:     build.BuilderV1,
		Platform:    spec.Platform, // the base images' platform, as docker build --platform
	})
	if err != nil {
		if terr := drainErr(tarErr); terr != nil {
			return fmt.Errorf("%w: sending build context %s: %v", backend.ErrInvalidConfig, contextDir, terr)
		}
		return fmt.Errorf("building image %s from %s: %w", tag, dockerfile, b.translate(err))
	}
	defer resp.Body.Close()
	var stepImages []string
	if err := b.readBuild(resp.Body, tag, dockerfile, len(labels), report, &stepImages); err != nil {
		b.removeStepImages(ctx, stepImages)
		if terr := drainErr(tarErr); terr != nil {
			return fmt.Errorf("%w: sending build context %s: %v", backend.ErrInvalidConfig, contextDir, terr)
		}
		return err
	}
	return nil
}

// removeStepImages removes, after a failed build, the images its finished
// steps made that nothing tags (the last first, so each is a leaf by its
// turn): the classic builder keeps them as its cache, but they carry none
// of this backend's labels, so sbx gc would never find them. Images that
// are tagged (the base image) or have other children (an earlier build's
// cache, shared) stay: the engine refuses to remove them unforced.
func (b *Backend) removeStepImages(ctx context.Context, ids []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, id := range slices.Backward(ids) {
		img, err := b.cli.ImageInspect(ctx, id)
		if err != nil || len(img.RepoTags) > 0 {
			continue
		}
		if _, err := b.cli.ImageRemove(ctx, id, image.RemoveOptions{}); err != nil {
			b.log.Debug("keeping a failed build's step image", "image", id, "err", err)
		}
	}
}

// existingBuildImage is the image a Create with spec.Build uses without
// building (ok): Spec.Image on the engine when this backend did not build
// it (OpenSage's images, pulled or built by hand), else, with pull_policy
// "missing", the image pulled; a pull that fails falls back to the build,
// and says so. Pull policy "always" always builds (pulling base images);
// "never" uses an image on the engine and else builds.
func (b *Backend) existingBuildImage(ctx context.Context, spec backend.Spec, report func(backend.Progress)) (image.InspectResponse, bool, error) {
	policy := cmp(b.cfg.PullPolicy, PullMissing)
	if policy == PullAlways {
		return image.InspectResponse{}, false, nil
	}
	img, err := b.cli.ImageInspect(ctx, spec.Image)
	switch err := b.translate(err); {
	case err == nil && !platformMatches(img, spec.Platform):
		return img, false, nil // the build makes the platform asked for
	case err == nil && img.Config != nil && img.Config.Labels[labelDockerfile] != "":
		return img, false, nil // ours: rebuilt (layer cache hits)
	case err == nil:
		b.log.Info("using the image on the engine instead of building it", "image", spec.Image)
		report(backend.Progress{Step: "build", Status: "using " + spec.Image + " from the engine (not built: it exists, as OpenSage uses it)", Done: true})
		return img, true, nil
	case !errors.Is(err, backend.ErrNotFound):
		return img, false, err
	case policy == PullNever:
		return img, false, nil
	}
	if perr := b.pull(ctx, spec.Image, spec.Platform, report); perr != nil {
		b.log.Info("pulling the image failed; building it", "image", spec.Image, "err", perr)
		report(backend.Progress{Step: "build", Status: fmt.Sprintf("pulling %s failed (%v); building it from the Dockerfile", spec.Image, perr)})
		return img, false, nil
	}
	img, err = b.cli.ImageInspect(ctx, spec.Image)
	if err == nil && platformMatches(img, spec.Platform) {
		return img, true, nil
	}
	return img, false, nil
}

// readDockerfile resolves bs's context folder and Dockerfile (by default
// the context's, relative to the context) and reads the Dockerfile.
func readDockerfile(bs *backend.Build) (contextDir, dockerfile string, data []byte, err error) {
	contextDir, err = filepath.Abs(bs.ContextDir)
	if err != nil {
		return "", "", nil, fmt.Errorf("%w: build context %q: %v", backend.ErrInvalidConfig, bs.ContextDir, err)
	}
	if fi, err := os.Stat(contextDir); err != nil || !fi.IsDir() {
		return "", "", nil, fmt.Errorf("%w: build context %s is not a folder (the Dockerfile's folder is the context)", backend.ErrInvalidConfig, contextDir)
	}
	dockerfile = bs.Dockerfile
	switch {
	case dockerfile == "":
		dockerfile = filepath.Join(contextDir, "Dockerfile")
	case !filepath.IsAbs(dockerfile):
		dockerfile = filepath.Join(contextDir, dockerfile)
	}
	data, err = os.ReadFile(dockerfile)
	if err != nil {
		return "", "", nil, fmt.Errorf("%w: Dockerfile %s: %v", backend.ErrInvalidConfig, dockerfile, errors.Unwrap(err))
	}
	return contextDir, dockerfile, data, nil
}

// checkBaseImages refuses, before a build with pull_policy "never" starts,
// a Dockerfile whose base images are not on the engine: the classic
// builder would pull them itself.
func (b *Backend) checkBaseImages(ctx context.Context, dockerfile string, data []byte) error {
	for _, base := range baseImages(data) {
		if _, err := b.cli.ImageInspect(ctx, base); err != nil {
			if err := b.translate(err); !errors.Is(err, backend.ErrNotFound) {
				return err
			}
			return fmt.Errorf("%w: base image %s of Dockerfile %s is not on the engine and pull_policy is \"never\" (pull it, or change [sandbox.native] pull_policy)",
				backend.ErrNotFound, base, dockerfile)
		}
	}
	return nil
}

// contextTar streams the build context: contextDir as a tar, without what
// .dockerignore leaves out, and the Dockerfile (data) at its own path when
// it lives there, else under a name of its own (as docker build -f does),
// which it returns. The tar's error arrives on tarErr when it ends.
func contextTar(contextDir, dockerfile string, data []byte) (r *io.PipeReader, dfName string, tarErr <-chan error, err error) {
	dfName, err = filepath.Rel(contextDir, dockerfile)
	outside := err != nil || dfName == ".." || strings.HasPrefix(dfName, ".."+string(filepath.Separator))
	if outside {
		dfName = ".sbx-dockerfile-" + newID()
	}
	dfName = filepath.ToSlash(dfName)
	skip, err := dockerignore(contextDir, dfName)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: build context %s: %v", backend.ErrInvalidConfig, contextDir, err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		tw := tar.NewWriter(pw)
		err := tartree.Dir(tw, contextDir, tartree.Options{Skip: skip})
		if err == nil && outside {
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dfName, Mode: 0o644,
				Size: int64(len(data)), ModTime: time.Unix(0, 0)})
			if err == nil {
				_, err = tw.Write(data)
			}
		}
		if err == nil {
			err = tw.Close()
		}
		done <- err
		pw.CloseWithError(err)
	}()
	return pr, dfName, done, nil
}

func drainErr(ch <-chan error) error {
	select {
	case err := <-ch:
		return err
	default:
		return nil
	}
}

// readBuild follows the builder's message stream, reporting steps and base
// image pulls, and turns a failure into an error naming the Dockerfile, the
// step and the tail of that step's output. The builder counts one LABEL
// step per label it was given after the Dockerfile's own; steps are
// reported as numbered in the Dockerfile, without those.
//
// The IDs of the images the steps made ("---> ID" lines) are appended to
// stepImages.
func (b *Backend) readBuild(r io.Reader, tag, dockerfile string, labelSteps int, report func(backend.Progress), stepImages *[]string) error {
	var (
		step, steps int64
		instr       string
		tail        []string
		partial     string // stream text after the last newline
	)
	addLine := func(line string) {
		line = ansiEscape().ReplaceAllString(strings.TrimRight(line, "\r"), "")
		if m := stepLine().FindStringSubmatch(line); m != nil {
			step, _ = strconv.ParseInt(m[1], 10, 64)
			steps, _ = strconv.ParseInt(m[2], 10, 64)
			instr, tail = m[3], nil
			if own := steps - int64(labelSteps); own > 0 {
				steps = own
			}
			if step <= steps {
				report(backend.Progress{Step: "build", Status: fmt.Sprintf("Step %d/%d : %s", step, steps, instr), Current: step, Total: steps})
			}
			return
		}
		t := strings.TrimSpace(line)
		if id, ok := strings.CutPrefix(t, "---> "); ok && imageIDRE().MatchString(id) {
			*stepImages = append(*stepImages, id)
		}
		if t == "" || strings.HasPrefix(t, "---> ") || strings.HasPrefix(t, "Removing intermediate container") {
			return
		}
		tail = append(tail, line)
		if len(tail) > buildTailLines {
			tail = slices.Delete(tail, 0, len(tail)-buildTailLines)
		}
	}
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var m struct {
			Stream         string `json:"stream"`
			Status         string `json:"status"`
			ID             string `json:"id"`
			ProgressDetail struct {
				Current int64 `json:"current"`
				Total   int64 `json:"total"`
			} `json:"progressDetail"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		err := dec.Decode(&m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("building image %s from %s: reading the engine's output: %w", tag, dockerfile, b.translate(err))
		}
		if m.Stream != "" {
			lines := strings.Split(partial+m.Stream, "\n")
			partial = lines[len(lines)-1]
			for _, l := range lines[:len(lines)-1] {
				addLine(l)
			}
		}
		if m.Status != "" {
			report(backend.Progress{Step: "pull", ID: m.ID, Status: m.Status,
				Current: m.ProgressDetail.Current, Total: m.ProgressDetail.Total})
		}
		if msg := cmp(m.ErrorDetail.Message, m.Error); msg != "" {
			if partial != "" {
				addLine(partial)
			}
			return buildError(tag, dockerfile, step, steps, instr, strings.TrimSpace(msg), tail)
		}
	}
	if partial != "" {
		addLine(partial)
	}
	report(backend.Progress{Step: "build", Status: "built " + tag, Current: steps, Total: steps, Done: true})
	return nil
}

// buildError describes a failed build. A base image the registry does not
// have is ErrNotFound, a registry that cannot be reached ErrUnavailable,
// anything else (a failing RUN, a syntax error, a missing COPY source) is
// the Dockerfile's: ErrInvalidConfig.
func buildError(tag, dockerfile string, step, steps int64, instr, msg string, tail []string) error {
	sentinel := backend.ErrInvalidConfig
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "pull access denied"), strings.Contains(low, "manifest unknown"),
		strings.HasPrefix(strings.ToUpper(instr), "FROM") && strings.Contains(low, "not found"):
		sentinel = backend.ErrNotFound
	case strings.Contains(low, "connection refused"), strings.Contains(low, "no such host"),
		strings.Contains(low, "i/o timeout"), strings.Contains(low, "tls handshake"):
		sentinel = backend.ErrUnavailable
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "building image %s from %s", tag, dockerfile)
	if step > 0 {
		fmt.Fprintf(&sb, ": step %d/%d (%s)", step, steps, instr)
	}
	fmt.Fprintf(&sb, " failed: %s", msg)
	if len(tail) > 0 {
		sb.WriteString("\noutput of the step (last lines):")
		for _, l := range tail {
			sb.WriteString("\n  " + l)
		}
	}
	return fmt.Errorf("%w: %s", sentinel, sb.String())
}

// baseImages lists the images a Dockerfile's FROM lines name, leaving out
// scratch, earlier stages and names that depend on build arguments.
func baseImages(dockerfile []byte) []string {
	var out []string
	stages := map[string]bool{}
	// Join continuation lines first.
	text := strings.ReplaceAll(strings.ReplaceAll(string(dockerfile), "\\\r\n", " "), "\\\n", " ")
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		f = slices.DeleteFunc(f[1:], func(s string) bool { return strings.HasPrefix(s, "--") })
		if len(f) == 0 {
			continue
		}
		img := f[0]
		if img != "scratch" && !strings.Contains(img, "$") && !stages[strings.ToLower(img)] && !slices.Contains(out, img) {
			out = append(out, img)
		}
		if len(f) >= 3 && strings.EqualFold(f[1], "AS") {
			stages[strings.ToLower(f[2])] = true
		}
	}
	return out
}
