package session

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/imagearchive"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// Bundles.
//
// A bundle is one tar holding a whole session, so that it starts again on
// another backend or machine (sbx snapshot -o, sbx restore, sbx move):
//
//	sandboxkit-bundle.json   the Manifest (first entry), Images = "images/"
//	volumes/<role>.tar       each read-write session volume, as Checkpoint saves it
//	images/...               an image archive (backend.ImageArchiver) holding
//	                         one image per sandbox (last)
//
// The images are a snapshot of each sandbox (backend.Snapshotter),
// labelled backend.LabelTransient and removed from the source backend
// once written; a restore loads them into the target backend, where sbx
// gc removes them once no sandbox uses them. The manifest names each
// sandbox's image by its name in the archive.
//
// WriteBundle writes the images as an OCI image layout (with Docker's
// manifest.json beside it, which every Docker engine's image load reads),
// converting what the backend's image save wrote: that needs the archive
// on disk once. A bundle written for one reader at once (sbx move)
// carries the backend's own archive instead (BundleOptions.AsSaved).
// Restore reads either in one pass, streaming the images to the target
// backend's image load.

// bundleManifestName is the manifest's entry in a bundle.
const bundleManifestName = "sandboxkit-bundle.json"

// Folders of a bundle.
const (
	bundleImages  = "images/"
	bundleVolumes = "volumes/"
)

// BundleOptions says how to write a bundle.
type BundleOptions struct {
	// AsSaved writes the images as the backend's image save wrote them
	// (Docker's older engines: not an OCI layout), so that nothing waits
	// for the whole archive: for a bundle read at once by Restore (sbx
	// move).
	AsSaved bool
	// Progress, when set, is told each step as it starts ("snapshot",
	// "volumes", "images") and, at the end, "done" with the bytes written.
	Progress func(step string, bytes int64)
}

func (o BundleOptions) report(step string, n int64) {
	if o.Progress != nil {
		o.Progress(step, n)
	}
}

// WriteBundle writes the session as a bundle to w (see Bundles above) and
// returns its manifest. The sandboxes keep running; each is frozen while
// its snapshot is taken. A session whose backend cannot save images is
// an error wrapping errors.ErrUnsupported that names the backend.
func (s *Session) WriteBundle(ctx context.Context, w io.Writer, opts BundleOptions) (*Manifest, error) {
	arch, ok := backend.AsBackend[backend.ImageArchiver](s.backend)
	if !ok {
		return nil, fmt.Errorf("session %s: the %s backend cannot save images for a bundle: %w", s.ID, s.backend.Name(), errors.ErrUnsupported)
	}
	m := &Manifest{Version: ManifestVersion, Session: s.ID, Backend: s.backend.Name(), CreatedAt: time.Now().UTC(),
		Sandboxes: map[string]ManifestSandbox{}, Volumes: map[string]ManifestVolume{}, ImageFolder: bundleImages}

	// Snapshots first, all of them, so that each sandbox's files are
	// taken as close in time as they can be.
	opts.report("snapshot", 0)
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	var refs []string
	defer func() {
		m, ok := backend.AsBackend[backend.SnapshotManager](s.backend)
		if !ok {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, ref := range refs {
			if err := m.RemoveSnapshot(cctx, ref); err != nil {
				s.log.Warn("removing a bundle's snapshot (sbx gc removes it later)", "snapshot", ref, "err", err)
			}
		}
	}()
	for _, mem := range s.Members() {
		sn, ok := backend.As[backend.Snapshotter](mem.Sandbox)
		if !ok {
			return nil, fmt.Errorf("session %s: sandbox %q: the %s backend cannot take snapshots: %w", s.ID, mem.Name, s.backend.Name(), errors.ErrUnsupported)
		}
		repo := strings.Trim(notRepoChar.ReplaceAllString(strings.ToLower(mem.Name), "-"), "-")
		name := "sandboxkit-bundle/" + strings.ToLower(s.ID) + "-" + repo + ":" + stamp
		// Transient, not a TTL: the image keeps its labels where it is
		// loaded, and there it must stay while sandboxes use it.
		snap, err := sn.Snapshot(ctx, backend.SnapshotRequest{Ref: name, Labels: map[string]string{backend.LabelTransient: "1"}})
		if err != nil {
			return nil, fmt.Errorf("session %s: sandbox %q: snapshot: %w", s.ID, mem.Name, err)
		}
		refs = append(refs, snap.Ref)
		m.Sandboxes[mem.Name] = ManifestSandbox{Type: mem.Type, Image: name}
	}

	// The image save starts now: an engine prepares it (Docker 20.10
	// copies the layers aside) while the volumes are read.
	save := startSave(ctx, arch, refs)
	defer save.stop()

	opts.report("volumes", 0)
	tmp, err := bundleTemp()
	if err != nil {
		return nil, fmt.Errorf("session %s: bundle: %w", s.ID, err)
	}
	defer os.RemoveAll(tmp)
	staged, err := s.saveVolumes(ctx, m, tmp, "volume")
	if err != nil {
		return nil, err
	}
	for role, v := range m.Volumes {
		v.Archive = bundleVolumes + strings.ReplaceAll(role, "_", "-") + ".tar"
		m.Volumes[role] = v
	}

	cw := &countWriter{w: w}
	tw := tar.NewWriter(cw)
	data, _ := json.MarshalIndent(m, "", "  ")
	if err := writeTarFile(tw, bundleManifestName, append(data, '\n')); err != nil {
		return nil, fmt.Errorf("session %s: bundle: %w", s.ID, err)
	}
	for _, f := range staged {
		role := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f.final), "volume."), ".tar")
		if err := copyFileToTar(tw, bundleVolumes+role+".tar", f.tmp); err != nil {
			return nil, fmt.Errorf("session %s: bundle: volume %s: %w", s.ID, role, err)
		}
	}

	opts.report("images", cw.n)
	if err := save.writeTo(tw, tmp, opts.AsSaved); err != nil {
		return nil, fmt.Errorf("session %s: bundle: images: %w", s.ID, err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("session %s: bundle: %w", s.ID, err)
	}
	opts.report("done", cw.n)
	return m, nil
}

// imageSave is a backend's image save, streaming into a pipe.
type imageSave struct {
	pr   *io.PipeReader
	done chan error
	err  error
	over bool
}

func startSave(ctx context.Context, arch backend.ImageArchiver, refs []string) *imageSave {
	pr, pw := io.Pipe()
	s := &imageSave{pr: pr, done: make(chan error, 1)}
	go func() {
		err := arch.SaveImages(ctx, pw, refs)
		pw.CloseWithError(err)
		s.done <- err
	}()
	return s
}

// stop stops reading the save and returns its error (once it has ended).
func (s *imageSave) stop() error {
	if !s.over {
		s.pr.CloseWithError(errors.New("bundle: images no longer read"))
		s.err, s.over = <-s.done, true
	}
	return s.err
}

// writeTo writes the image archive into tw under bundleImages: as saved,
// or spooled to tmp and written as an OCI layout.
func (s *imageSave) writeTo(tw *tar.Writer, tmp string, asSaved bool) error {
	var err error
	if asSaved {
		err = reframe(tw, tar.NewReader(s.pr), bundleImages)
		if err == nil {
			// What may follow the archive's end (a tar padded to
			// its record size), so that the save ends as it would.
			_, err = io.Copy(io.Discard, s.pr)
		}
	} else {
		var imgs []imagearchive.Image
		imgs, err = imagearchive.Spool(s.pr, filepath.Join(tmp, "images"))
		if err == nil {
			err = imagearchive.Write(tw, bundleImages, imgs)
		}
	}
	if serr := s.stop(); serr != nil {
		return serr
	}
	return err
}

// reframe copies every entry of tr into tw with prefix added to its name.
func reframe(tw *tar.Writer, tr *tar.Reader, prefix string) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		hdr.Name = prefix + strings.TrimPrefix(hdr.Name, "./")
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

func writeTarFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func copyFileToTar(tw *tar.Writer, name, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: fi.Size(), ModTime: fi.ModTime(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// Restore starts a session from a bundle read from r (see Bundles above)
// on the Launcher's backend: it loads the bundle's images there (streamed
// to its image load), then launches every sandbox the bundle holds, each
// from its image, with the bundle's volumes restored, as a launch from a
// Checkpoint manifest does. The Launcher's config must have an entry of
// each sandbox's name; its image is replaced by the bundle's. A bundle
// that is not one, or whose volumes do not match their checksums, is an
// error before anything is made; the images loaded before a later failure
// are removed by sbx gc once no sandbox uses them.
//
// While the images load, the session's network and volumes are made,
// each volume with the bundle's archive in it (they come before the
// images), so that once the images are in only the sandboxes remain to
// be started. BundleProgress is called from the loading goroutine.
func (l *Launcher) Restore(ctx context.Context, r io.Reader) (*Session, error) {
	if l.Config == nil {
		return nil, backend.InvalidConfigf("session: Launcher without Config")
	}
	tmp, err := bundleTemp()
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	defer os.RemoveAll(tmp)
	tr := tar.NewReader(r)
	m, err := readBundle(tr, tmp)
	if err != nil {
		return nil, err
	}
	// Check the volumes before loading anything.
	if err := m.checkVolumeArchives(); err != nil {
		return nil, err
	}
	m.volumesChecked = true
	names := slices.Sorted(maps.Keys(m.Sandboxes))
	if err := l.checkEntries(names); err != nil {
		return nil, err
	}

	b, owned, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if owned {
			b.Close()
		}
	}()
	arch, ok := backend.AsBackend[backend.ImageArchiver](b)
	if !ok {
		return nil, fmt.Errorf("bundle: the %s backend cannot load images: %w", b.Name(), errors.ErrUnsupported)
	}

	// The images load while the network and volumes are made. A failure
	// of the latter stops the load; one of the load lets them be made
	// before they are removed (a request cut short could make one after
	// the removal looked for it).
	lctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	type loadResult struct {
		loaded map[string]string
		err    error
	}
	loadDone := make(chan loadResult, 1)
	go func() {
		loaded, err := l.loadBundleImages(lctx, arch, b.Name(), tr)
		loadDone <- loadResult{loaded, err}
	}()
	rl := *l
	rl.Manifest = m
	rl.Backend = b
	rl.fillVolumes = true
	p, perr := rl.prepare(ctx, names)
	if perr != nil {
		stop(perr)
	}
	res := <-loadDone
	if perr != nil {
		return nil, perr
	}
	if res.err != nil {
		p.abort(ctx)
		return nil, res.err
	}
	for name, sb := range m.Sandboxes {
		ref, ok := res.loaded[sb.Image]
		if !ok {
			p.abort(ctx)
			return nil, fmt.Errorf("bundle: sandbox %q: image %s is not in the bundle's images (they hold %s): %w",
				name, sb.Image, strings.Join(slices.Sorted(maps.Keys(res.loaded)), ", "), backend.ErrInvalidConfig)
		}
		sb.Image = ref
		m.Sandboxes[name] = sb
	}
	for _, mem := range p.ms {
		mem.spec.Image = m.Sandboxes[mem.name].Image
	}
	if l.Loaded != nil {
		l.Loaded()
	}
	s, err := p.run(ctx)
	if err != nil {
		return nil, err
	}
	if owned {
		s.ownsBackend = true
		owned = false // the session closes it now
	}
	return s, nil
}

// loadBundleImages loads the rest of the bundle, its images, into arch
// and reports it to BundleProgress.
func (l *Launcher) loadBundleImages(ctx context.Context, arch backend.ImageArchiver, name string, tr *tar.Reader) (map[string]string, error) {
	first, err := nextImageEntry(tr)
	if err != nil {
		return nil, err
	}
	// Waiting for the first entry may take a while (a save being
	// prepared): load nothing once the launch has failed meanwhile.
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	loaded, n, err := loadImages(ctx, arch, tr, first)
	if err != nil {
		return nil, fmt.Errorf("bundle: loading its images into the %s backend: %w", name, err)
	}
	if l.BundleProgress != nil {
		l.BundleProgress("loaded", n)
	}
	return loaded, nil
}

// readBundle reads a bundle up to its images: the manifest, and the
// volume archives, which it writes into dir (as the manifest's folder).
// tr then stands before the first image entry (see nextImageEntry), which
// may take a while to come: the bundle's writer may still be preparing
// the images.
func readBundle(tr *tar.Reader, dir string) (*Manifest, error) {
	m, err := readBundleManifest(tr)
	if err != nil {
		return nil, err
	}
	m.dir = dir
	want := map[string]bool{}
	for _, v := range m.Volumes {
		want[v.Archive] = true
	}
	for len(want) > 0 {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("bundle: no images (entries under %s): %w", bundleImages, backend.ErrInvalidConfig)
		}
		if err != nil {
			return nil, fmt.Errorf("bundle: %w: %w", err, backend.ErrInvalidConfig)
		}
		if strings.HasPrefix(hdr.Name, bundleImages) {
			return nil, fmt.Errorf("bundle: the manifest names volume archives the bundle does not hold before its images: %s: %w",
				strings.Join(slices.Sorted(maps.Keys(want)), ", "), backend.ErrInvalidConfig)
		}
		if !want[hdr.Name] || hdr.Typeflag != tar.TypeReg {
			return nil, unexpectedEntry(hdr)
		}
		delete(want, hdr.Name)
		if err := writeEntryFile(filepath.Join(dir, filepath.FromSlash(hdr.Name)), tr); err != nil {
			return nil, fmt.Errorf("bundle: %s: %w", hdr.Name, err)
		}
	}
	return m, nil
}

// nextImageEntry reads the header of the bundle's first image entry, which
// follows the volume archives.
func nextImageEntry(tr *tar.Reader) (*tar.Header, error) {
	hdr, err := tr.Next()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("bundle: no images (entries under %s): %w", bundleImages, backend.ErrInvalidConfig)
	}
	if err != nil {
		return nil, fmt.Errorf("bundle: %w: %w", err, backend.ErrInvalidConfig)
	}
	if !strings.HasPrefix(hdr.Name, bundleImages) {
		return nil, unexpectedEntry(hdr)
	}
	return hdr, nil
}

func unexpectedEntry(hdr *tar.Header) error {
	return fmt.Errorf("bundle: unexpected entry %q (a bundle holds %s, the volumes its manifest names and %s): %w",
		hdr.Name, bundleManifestName, bundleImages, backend.ErrInvalidConfig)
}

// bundleTempPrefix starts the names of the temporary folders WriteBundle
// and Restore make in the system's temporary folder (for volume archives
// and a spooled image archive): sbx-bundle-PID.START-RANDOM, so that
// PruneTemp finds those of a process that died before it removed them.
const bundleTempPrefix = "sbx-bundle-"

func bundleTemp() (string, error) {
	pid := os.Getpid()
	start, _ := procfs.StartTime(pid)
	return os.MkdirTemp("", fmt.Sprintf("%s%d.%d-", bundleTempPrefix, pid, start))
}

// PruneTemp removes the temporary folders of bundles (see WriteBundle and
// Restore) whose process is gone, and returns their paths; with dryRun it
// only names them. sbx gc calls it.
func PruneTemp(dryRun bool) ([]string, error) {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), bundleTempPrefix)
		proc, _, ok2 := strings.Cut(rest, "-")
		pidStr, startStr, ok3 := strings.Cut(proc, ".")
		pid, err1 := strconv.Atoi(pidStr)
		start, err2 := strconv.ParseUint(startStr, 10, 64)
		if !ok || !ok2 || !ok3 || err1 != nil || err2 != nil || !e.IsDir() || procfs.Alive(pid, start) {
			continue
		}
		p := filepath.Join(os.TempDir(), e.Name())
		out = append(out, p)
		if !dryRun {
			if err := os.RemoveAll(p); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// checkEntries checks that the config has an entry of each name.
func (l *Launcher) checkEntries(names []string) error {
	var missing []string
	for _, n := range names {
		if _, ok := l.Config.Sandbox.Sandboxes[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return backend.InvalidConfigf("%s: the bundle's sandboxes %s have no entry [sandbox.sandboxes.NAME] in this config (add them; their image is replaced by the bundle's)",
			l.Config.Describe(), strings.Join(missing, ", "))
	}
	return nil
}

// maxManifestSize bounds a bundle's manifest, which is decoded in memory.
const maxManifestSize = 1 << 20

// readBundleManifest reads a bundle's first entry, its manifest.
func readBundleManifest(tr *tar.Reader) (*Manifest, error) {
	hdr, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("bundle: not a bundle (a tar whose first entry is %s): %w: %w", bundleManifestName, err, backend.ErrInvalidConfig)
	}
	if hdr.Name != bundleManifestName || hdr.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("bundle: not a bundle: its first entry is %q, not %s: %w", hdr.Name, bundleManifestName, backend.ErrInvalidConfig)
	}
	if hdr.Size > maxManifestSize {
		return nil, fmt.Errorf("bundle: its manifest %s is %d bytes, more than the limit of %d bytes (1 MiB; the manifests sbx writes are a few KiB): %w",
			bundleManifestName, hdr.Size, maxManifestSize, backend.ErrInvalidConfig)
	}
	var m Manifest
	if err := json.NewDecoder(tr).Decode(&m); err != nil {
		return nil, fmt.Errorf("bundle: %s: %w: %w", bundleManifestName, err, backend.ErrInvalidConfig)
	}
	if m.Version > ManifestVersion {
		return nil, fmt.Errorf("bundle: format version %d is newer than this sandboxkit reads (%d): %w", m.Version, ManifestVersion, backend.ErrInvalidConfig)
	}
	if m.ImageFolder != bundleImages || len(m.Sandboxes) == 0 {
		return nil, fmt.Errorf("bundle: %s holds no images or sandboxes (a checkpoint manifest? start it with sbx up --from-manifest): %w", bundleManifestName, backend.ErrInvalidConfig)
	}
	for role, v := range m.Volumes {
		if !strings.HasPrefix(v.Archive, bundleVolumes) || path.Clean(v.Archive) != v.Archive || strings.Contains(v.Archive[len(bundleVolumes):], "/") {
			return nil, fmt.Errorf("bundle: volume %s: archive %q is not a file of %s: %w", role, v.Archive, bundleVolumes, backend.ErrInvalidConfig)
		}
	}
	return &m, nil
}

func writeEntryFile(p string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// loadImages streams the bundle's images (first, then every entry up to
// the end) to arch's image load, with the folder's prefix taken off.
func loadImages(ctx context.Context, arch backend.ImageArchiver, tr *tar.Reader, first *tar.Header) (map[string]string, int64, error) {
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		err := unframe(tar.NewWriter(pw), tr, first)
		pw.CloseWithError(err)
		copied <- err
	}()
	cr := &countReader{r: pr}
	loaded, err := arch.LoadImages(ctx, cr)
	if err == nil {
		_, err = io.Copy(io.Discard, cr) // anything the load left unread
	}
	pr.CloseWithError(errors.New("bundle: the image load stopped reading"))
	if cerr := <-copied; cerr != nil {
		return nil, cr.n, cerr
	}
	return loaded, cr.n, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// unframe writes hdr and the rest of tr into tw with bundleImages taken
// off each name; an entry outside it is an error.
func unframe(tw *tar.Writer, tr *tar.Reader, hdr *tar.Header) error {
	for {
		name, ok := strings.CutPrefix(hdr.Name, bundleImages)
		if !ok {
			return fmt.Errorf("unexpected entry %q after the images (they come last): %w", hdr.Name, backend.ErrInvalidConfig)
		}
		if name != "" {
			hdr.Name = name
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
		var err error
		if hdr, err = tr.Next(); errors.Is(err, io.EOF) {
			return tw.Close()
		} else if err != nil {
			return err
		}
	}
}

// volumeFill returns the archive that fills the session volume of role
// when it is made (Launcher.fillVolumes): the manifest's, and for the
// shared volume a copy of it whose env file is this session's (the
// archive holds the original session's), so that no sandbox needs to
// write it once it runs.
func (l *Launcher) volumeFill(s *Session, role string) (string, error) {
	src := l.Manifest.archivePath(l.Manifest.Volumes[role])
	if role != "shared" {
		return src, nil
	}
	f, err := os.CreateTemp(filepath.Dir(src), ".shared-env.*.tar")
	if err != nil {
		return "", err
	}
	err = withEnvFile(f, src, []byte(envFileText(s.ID, s.Env)))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("adding %s to %s: %w", EnvFile, src, err)
	}
	return f.Name(), nil
}

// withEnvFile writes to w the volume archive src with its EnvFile entry
// replaced by one holding env.
func withEnvFile(w io.Writer, src string, env []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tr := tar.NewReader(in)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if path.Clean(hdr.Name) == EnvFile {
			continue
		}
		keepXattrs(hdr)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := writeTarFile(tw, EnvFile, env); err != nil {
		return err
	}
	return tw.Close()
}

// envFileFilled reports whether the shared volume was made with the
// session's env file in it (see Launcher.volumeFill).
func (s *Session) envFileFilled() bool {
	return slices.ContainsFunc(s.volumes, func(v sessionVolume) bool { return v.role == "shared" && v.filled })
}
