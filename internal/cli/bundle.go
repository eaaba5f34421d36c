package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
	"github.com/sandboxkit/sandboxkit/session"
)

// Bundles: sbx snapshot -o, sbx restore and sbx move (see session's
// WriteBundle and Restore).

// bundleProgress prints a bundle's steps on stderr.
func (a *app) bundleProgress(verb string) func(step string, n int64) {
	start := time.Now()
	return func(step string, n int64) {
		if a.progress == progressNone {
			return
		}
		switch step {
		case "snapshot":
			fmt.Fprintf(a.stderr, "%s: taking snapshots of the sandboxes\n", verb)
		case "volumes":
			fmt.Fprintf(a.stderr, "%s: reading the session volumes\n", verb)
		case "images":
			fmt.Fprintf(a.stderr, "%s: writing the images\n", verb)
		case "done":
			fmt.Fprintf(a.stderr, "%s: %s in %s (%.1f MB/s)\n", verb, humanBytes(n), time.Since(start).Round(time.Millisecond),
				float64(n)/1e6/max(time.Since(start).Seconds(), 1e-3))
		}
	}
}

// resumeSession opens the config's backend and resumes session id there;
// closeAll closes both.
func (a *app) resumeSession(ctx context.Context, id string) (s *session.Session, closeAll func(), err error) {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	s, err = (&session.Launcher{Config: cfg, Backend: b, Logger: a.logger}).Resume(ctx, id)
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return s, func() { s.Close(); b.Close() }, nil
}

// writeBundle writes session id's bundle to out ("-": stdout), through a
// temporary file renamed into place once complete.
func (a *app) writeBundle(ctx context.Context, id, out string) error {
	s, closeAll, err := a.resumeSession(ctx, id)
	if err != nil {
		return fmt.Errorf("%w (sbx snapshot -o takes a session ID, as sbx status lists them)", err)
	}
	defer closeAll()
	opts := session.BundleOptions{Progress: a.bundleProgress("snapshot")}
	if out == "-" {
		_, err := s.WriteBundle(ctx, a.stdout, opts)
		return err
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".*.tmp")
	if err != nil {
		return fmt.Errorf("-o %s: %w", out, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := s.WriteBundle(ctx, f, opts); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("-o %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-o %s: %w", out, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), abs); err != nil {
		return fmt.Errorf("-o %s: %w", out, err)
	}
	done = true
	if a.json {
		return printJSON(a.stdout, map[string]string{"session": id, "bundle": abs})
	}
	fmt.Fprintln(a.stdout, abs)
	return nil
}

func (a *app) restoreCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "restore [flags] BUNDLE",
		Short: "Start a session from a bundle (sbx snapshot -o) on this config's backend",
		Long: `Restore starts a new session from a bundle that sbx snapshot -o wrote ("-"
reads it from stdin), on the backend of --config (which may differ from the
one the bundle came from): it loads the bundle's images into that backend,
creates each sandbox from its image, fills the session volumes (/shared,
/bash_tools) with the bundle's, then provisions and probes the sandboxes as
sbx up does. The config needs an entry of each sandbox's name; its image is
replaced by the bundle's. Processes are not restored: each sandbox starts its
command afresh. It prints the new session as sbx up does.`,
		Example: `  sbx snapshot -o work.tar 3f9c2a1b7d0e
  sbx restore --config gpu-server.toml work.tar`,
		Args: exactArgs(1, "a bundle file (or - for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.restore(cmd.Context(), args[0])
		},
	}
}

func (a *app) restore(ctx context.Context, file string) error {
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		defer f.Close()
		r = f
	}
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return a.restoreFrom(ctx, &session.Launcher{Config: cfg, Backend: b, Logger: a.logger}, r, "restore")
}

// restoreFrom restores a bundle with l and prints the session.
func (a *app) restoreFrom(ctx context.Context, l *session.Launcher, r io.Reader, verb string) error {
	s, err := a.restoreSession(ctx, l, r, verb)
	if err != nil {
		return err
	}
	defer s.Close()
	return a.printRestored(ctx, s)
}

// printRestored prints a restored session as sbx up does.
func (a *app) printRestored(ctx context.Context, s *session.Session) error {
	res, err := describeSession(ctx, s)
	if err != nil {
		return err
	}
	return a.printSession(res)
}

// restoreSession restores a bundle with l, showing the progress.
func (a *app) restoreSession(ctx context.Context, l *session.Launcher, r io.Reader, verb string) (*session.Session, error) {
	disp, err := newSessionDisplay(a.progress, a.stderr)
	if err != nil {
		return nil, err
	}
	l.Progress = disp.report
	if a.progress != progressNone {
		fmt.Fprintf(a.stderr, "%s: loading the images into the %s backend\n", verb, l.Backend.Name())
		start := time.Now()
		l.BundleProgress = func(_ string, n int64) {
			d := time.Since(start)
			fmt.Fprintf(a.stderr, "%s: images loaded: %s in %s (%.1f MB/s)\n", verb, humanBytes(n), d.Round(time.Millisecond),
				float64(n)/1e6/max(d.Seconds(), 1e-3))
		}
	}
	s, err := l.Restore(ctx, r)
	disp.close()
	return s, err
}

func (a *app) moveCmd() *cobra.Command {
	var (
		to   string
		keep bool
	)
	cmd := &cobra.Command{
		Use:   "move [flags] SESSION --to OTHER.toml",
		Short: "Move a session to another config's backend, files and all",
		Long: `Move starts session SESSION (of --config's backend) again on the backend of
--to, with every sandbox's files and the session volumes, then removes the
original (with --keep it stays). It is sbx snapshot -o and sbx restore in one
stream: the images go from one engine's image save straight into the other's
image load (to a remote Docker through its SSH connection), without a file or
a registry in between. Processes are not moved: each sandbox starts its
command afresh. It prints the new session as sbx up does.

Once the images are in on the other side, the original's sandboxes are stopped
(on Docker) while the new ones start, and removed once those run. When the
restore fails, the original is kept: a sandbox stopped by then is started
again, its command afresh, with its files as they were.`,
		Example: `  sbx move 3f9c2a1b7d0e --to gpu-server.toml`,
		Args:    exactArgs(1, "a session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usageError(cmd, "--to is required: the config of the backend to move the session to")
			}
			return a.move(cmd.Context(), args[0], to, keep)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "config file of the backend to move the session to")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the original session")
	return cmd
}

// errRestoreStopped is what sbx move's bundle writer hears once the
// restore stopped reading: a consequence, not a cause, of a failed move.
var errRestoreStopped = errors.New("move: the restore stopped reading")

func (a *app) move(ctx context.Context, id, to string, keep bool) error {
	dst, err := registry().LoadConfig(to)
	if err != nil {
		return fmt.Errorf("--to: %w", handOverElsewhere(err))
	}
	src, closeAll, err := a.resumeSession(ctx, id)
	if err != nil {
		return err
	}
	defer closeAll()
	for _, w := range dst.Warnings {
		fmt.Fprintf(a.stderr, "warning: %s\n", w)
	}
	db, err := dst.Open(ctx, a.logger)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	defer db.Close()

	// Both halves report progress at once: serialise their writes where
	// stderr is no file (a file's writes are whole already).
	if _, ok := a.stderr.(*os.File); !ok {
		a.stderr = &syncbuf.Writer{W: a.stderr}
	}
	pr, pw := io.Pipe()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	written := make(chan error, 1)
	go func() {
		_, err := src.WriteBundle(wctx, pw, session.BundleOptions{AsSaved: true, Progress: a.bundleProgress("move")})
		pw.CloseWithError(err)
		written <- err
	}()
	l := &session.Launcher{Config: dst, Backend: db, Logger: a.logger}
	// The original's sandboxes stop while the new ones start: what they
	// do from then on would not move, and stopped, they are removed
	// sooner once the new ones run.
	stopped := func() []backend.Stopper { return nil }
	if !keep {
		l.Loaded = func() { stopped = stopMembers(ctx, src) }
	}
	moved, rerr := a.restoreSession(ctx, l, pr, "move")
	pr.CloseWithError(errRestoreStopped)
	if rerr != nil {
		cancel()
	}
	werr := <-written
	if rerr != nil {
		kept := keptMessage(id, startAgain(ctx, stopped()))
		if werr != nil && !errors.Is(werr, context.Canceled) && !errors.Is(werr, errRestoreStopped) {
			return fmt.Errorf("%w (and writing the bundle: %v); %s", rerr, werr, kept)
		}
		return fmt.Errorf("%w; %s", rerr, kept)
	}
	defer moved.Close()
	// The restore succeeded: the original goes while the new session is
	// printed (unless the bundle's writer failed, which the restore,
	// having read a whole bundle, should not have let happen).
	removed := make(chan error, 1)
	if keep || werr != nil {
		removed <- startAgain(ctx, stopped())
	} else {
		go func() {
			stopped()
			start := time.Now()
			err := src.Destroy(ctx)
			if err == nil && a.progress != progressNone {
				fmt.Fprintf(a.stderr, "move: removed the original session %s in %s\n", id, time.Since(start).Round(time.Millisecond))
			}
			removed <- err
		}()
	}
	perr := a.printRestored(ctx, moved)
	if werr != nil {
		return errors.Join(perr, fmt.Errorf("move: %w; %s", werr, keptMessage(id, <-removed)))
	}
	if err := <-removed; err != nil {
		return errors.Join(perr, fmt.Errorf("move: the session runs on the new backend, but removing the original %s failed: %w (sbx down %s)", id, err, id))
	}
	return perr
}

// stopMembers stops every sandbox of s that can be stopped, all at once,
// and returns a function that waits for that and returns those it
// stopped (or tried to: a failed stop may have stopped it all the same).
func stopMembers(ctx context.Context, s *session.Session) func() []backend.Stopper {
	ctx = context.WithoutCancel(ctx)
	var (
		wg    sync.WaitGroup
		tried []backend.Stopper
	)
	for _, mem := range s.Members() {
		st, ok := backend.As[backend.Stopper](mem.Sandbox)
		if !ok {
			continue
		}
		tried = append(tried, st)
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			st.Stop(sctx) // one that kept running is removed all the same
		})
	}
	return func() []backend.Stopper {
		wg.Wait()
		return tried
	}
}

// keptMessage says that session id is kept after a failed move, and what
// failed to start again of it (startErr, when not nil).
func keptMessage(id string, startErr error) string {
	if startErr == nil {
		return fmt.Sprintf("session %s is kept", id)
	}
	return fmt.Sprintf("session %s is kept, but a sandbox of it stopped for the move did not start again: %v (its files are kept; sbx status %s starts it again)", id, startErr, id)
}

// startAgain starts the sandboxes stopMembers stopped (a running one is
// left as it is), even when ctx was cancelled.
func startAgain(ctx context.Context, sts []backend.Stopper) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	errs := make([]error, len(sts))
	var wg sync.WaitGroup
	for i, st := range sts {
		wg.Go(func() { errs[i] = st.Start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
