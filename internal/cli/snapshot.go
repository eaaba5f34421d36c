package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
)

func (a *app) snapshotCmd() *cobra.Command {
	var (
		ref, out string
		ttl      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "snapshot [flags] ID|NAME  |  snapshot -o BUNDLE SESSION",
		Short: "Save a sandbox's files as an image and print its reference",
		Long: `Snapshot saves a sandbox's file system as an image of its backend and prints
the image's reference, which a config entry's image or sbx run --image takes to
start sandboxes with those files. The sandbox keeps running (it may be frozen
while its files are read). Processes and memory are not saved, nor bind-mounted
volumes.

native and remotedocker commit the container to an image (--ref is an image
reference); lite saves its upper folder as a layer over the sandbox's image and
local its folder as an archive (--ref is any name; the reference is
snapshot:NAME). k8s and opensandbox cannot take snapshots.

A snapshot of the same name replaces the one before. With --ttl, sbx gc
removes the snapshot once the TTL has run out; without, it stays until
removed. A snapshot is sbx snapshot's until the backend hands it over, just
before the reference is printed: one whose sbx snapshot was killed before
then is removed by sbx gc.

With -o, the argument is a session ID (sbx status lists them) and snapshot
writes a bundle to the file BUNDLE ("-": stdout): one tar holding an image of
each of the session's sandboxes (an OCI image layout that docker load also
reads), its /shared and /bash_tools volumes and a manifest. sbx restore starts
it on any backend that loads images (native, remotedocker, lite); sbx move
does both in one stream. The images taken for it are removed from this
backend once written.`,
		Example: `  sbx snapshot main
  sbx snapshot --ref before-tests --ttl 24h 3f9c2a
  sbx run --image "$(sbx snapshot main)" -- ls
  sbx snapshot -o work.tar 3f9c2a1b7d0e`,
		Args: exactArgs(1, "a sandbox ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out != "" {
				if ref != "" || ttl != 0 {
					return usageError(cmd, "-o writes a bundle, whose images are removed once written: --ref and --ttl do not apply")
				}
				return a.writeBundle(cmd.Context(), args[0], out)
			}
			if ttl < 0 {
				return usageError(cmd, "--ttl must not be negative, got %s", ttl)
			}
			return a.snapshot(cmd.Context(), args[0], backend.SnapshotRequest{Ref: ref, TTL: ttl})
		},
	}
	cmd.AddCommand(a.snapshotLsCmd(), a.snapshotRmCmd())
	f := cmd.Flags()
	f.StringVar(&ref, "ref", "", "name of the snapshot (default: the backend chooses one)")
	f.StringVarP(&out, "output", "o", "", "write the session SESSION as a bundle to this file (- for stdout)")
	f.DurationVar(&ttl, "ttl", 0, "remove the snapshot with sbx gc after this long (e.g. 24h; default: keep it)")
	return cmd
}

// snapshotJSON is a snapshot in --json output.
type snapshotJSON struct {
	Ref       string            `json:"ref"`
	Sandbox   string            `json:"sandbox"`
	Backend   string            `json:"backend"`
	Base      string            `json:"base,omitempty"`
	Size      int64             `json:"size"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
}

func (a *app) snapshot(ctx context.Context, ref string, req backend.SnapshotRequest) error {
	// The reference is written before the backend is closed: a sbx killed
	// between the snapshot's hand-over and the write leaves a snapshot no
	// one knows of, so that span is kept short.
	return withCapability(ctx, a, ref, "take snapshots", func(b backend.Backend, sb backend.Sandbox, sn backend.Snapshotter) error {
		snap, err := sn.Snapshot(ctx, req)
		if err != nil {
			return err
		}
		out := fmt.Appendln(nil, snap.Ref)
		if a.json {
			js := snapshotJSON{Ref: snap.Ref, Sandbox: sb.ID(), Backend: b.Name(), Base: snap.Base, Size: snap.Size,
				Labels: snap.Labels, CreatedAt: snap.CreatedAt}
			if !snap.ExpiresAt.IsZero() {
				js.ExpiresAt = &snap.ExpiresAt
			}
			out = jsonBytes(js)
		}
		return handOver(ctx, a.stdout, out, "snapshot", func(ctx context.Context) error {
			m, ok := backend.AsBackend[backend.SnapshotManager](b)
			if !ok {
				return fmt.Errorf("the %s backend cannot remove snapshots", b.Name())
			}
			return m.RemoveSnapshot(ctx, snap.Ref)
		})
	})
}

// whyNot says why a built-in backend has no snapshots or forks.
var whyNot = map[string]string{
	"k8s":         "Kubernetes has no API that saves a pod's file system as an image",
	"opensandbox": "the OpenSandbox API has no call that saves or copies a sandbox",
}

// withCapability opens the config's backend, finds sandbox ref (an ID or a
// name, as sbx rm does) and runs do with it as a C; a backend without the
// capability, or one answering ErrUnsupported, gets cannot's error (what:
// "fork sandboxes"). It returns the backend (closed by then: for its name)
// and the sandbox.
func withCapability[C any](ctx context.Context, a *app, ref, what string, do func(b backend.Backend, sb backend.Sandbox, c C) error) error {
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	sb, err := resolve(ctx, b, ref)
	if err != nil {
		return err
	}
	c, ok := backend.As[C](sb)
	if !ok {
		return cannot(b, what, sb)
	}
	if err := do(b, sb, c); errors.Is(err, errors.ErrUnsupported) {
		return cannot(b, what, sb, err)
	} else if err != nil {
		return err
	}
	return nil
}

// cannot is the error for a sandbox whose backend lacks a capability:
// it names the backend and, for the built-in ones, why; cause is the
// backend's own ErrUnsupported error, when it answered one.
func cannot(b backend.Backend, what string, sb backend.Sandbox, cause ...error) error {
	if len(cause) > 0 {
		return fmt.Errorf("sandbox %s: the %s backend cannot %s: %w", sb.ID(), b.Name(), what, cause[0])
	}
	why := whyNot[b.Name()]
	if why == "" {
		why = "its sandboxes do not implement it"
	}
	return fmt.Errorf("sandbox %s: the %s backend cannot %s: %s: %w", sb.ID(), b.Name(), what, why, errors.ErrUnsupported)
}

// snapshotLsCmd lists the backend's snapshots; snapshotRmCmd removes some.
func (a *app) snapshotLsCmd() *cobra.Command {
	var session string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the backend's snapshots",
		Long: `Ls lists the snapshots of the config's backend (sbx snapshot's, and the
images sbx restore and sbx move loaded, which carry sandboxkit.transient and
go with sbx gc once no sandbox uses them): reference, size, age, expiry.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.snapshotLs(cmd.Context(), session)
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only the snapshots of this session")
	return cmd
}

func (a *app) snapshotLs(ctx context.Context, sessionID string) error {
	b, m, err := a.snapshotManager(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	snaps, err := m.ListSnapshots(ctx, backend.Filter{Session: sessionID})
	if err != nil {
		return err
	}
	slices.SortFunc(snaps, func(x, y backend.Snapshot) int { return y.CreatedAt.Compare(x.CreatedAt) })
	if a.json {
		out := []snapshotJSON{}
		for _, sn := range snaps {
			j := snapshotJSON{Ref: sn.Ref, Sandbox: sn.Labels[backend.LabelSnapshotOf], Backend: b.Name(), Base: sn.Base,
				Size: sn.Size, Labels: sn.Labels, CreatedAt: sn.CreatedAt}
			if !sn.ExpiresAt.IsZero() {
				j.ExpiresAt = &sn.ExpiresAt
			}
			out = append(out, j)
		}
		return printJSON(a.stdout, out)
	}
	t := newTable(a.stdout, "REF", "OF", "SIZE", "CREATED", "EXPIRES")
	now := time.Now()
	for _, sn := range snaps {
		size, expires := "-", "-"
		if sn.Size >= 0 {
			size = humanBytes(sn.Size)
		}
		if !sn.ExpiresAt.IsZero() {
			expires = "in " + shortDuration(sn.ExpiresAt.Sub(now))
		}
		if sn.Labels[backend.LabelTransient] != "" {
			expires = "when unused"
		}
		t.row(sn.Ref, orDash(sn.Labels[backend.LabelSnapshotOf]), size, shortDuration(now.Sub(sn.CreatedAt))+" ago", expires)
	}
	return t.flush()
}

// snapshotManager opens the config's backend (closed by the caller) and
// finds its SnapshotManager.
func (a *app) snapshotManager(ctx context.Context) (backend.Backend, backend.SnapshotManager, error) {
	_, b, err := a.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, ok := backend.AsBackend[backend.SnapshotManager](b)
	if !ok {
		b.Close()
		return nil, nil, fmt.Errorf("the %s backend has no snapshots: %w", b.Name(), errors.ErrUnsupported)
	}
	return b, m, nil
}

func (a *app) snapshotRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm REF...",
		Short: "Remove snapshots",
		Long: `Rm removes snapshots by reference (as sbx snapshot printed it, or sbx snapshot
ls lists it). Sandboxes started from a snapshot keep running; removing one
that is gone is no error.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.snapshotRm(cmd.Context(), args)
		},
	}
}

func (a *app) snapshotRm(ctx context.Context, refs []string) error {
	b, m, err := a.snapshotManager(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	var errs []error
	for _, ref := range refs {
		if err := m.RemoveSnapshot(ctx, ref); err != nil {
			errs = append(errs, err)
			continue
		}
		if !a.json {
			fmt.Fprintln(a.stdout, ref)
		}
	}
	return errors.Join(errs...)
}
