package native

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// Spec.Existing (OpenSage's container_id) adopts a running container that
// sandboxkit did not make. The container is left as it is, with two
// exceptions: sbxd is copied to /.sbx/sbxd when the container has none (an
// archive API write into its file system, as docker cp does), so commands
// get timeouts and process-tree kills inside the container; and nothing is
// labelled, because a container's labels cannot change. Destroy only
// detaches.
//
// When sbxd cannot be put there (a read-only root file system, a /.sbx that
// is something else, an image for another architecture, noexec), commands
// run as plain engine execs: they work, but a timeout or a cancelled
// context only stops waiting for them (exit 124 / the context's error)
// while the process keeps running in the container, since the exec API has
// no kill. The backend logs a warning saying so.

// adoptedPrefix starts the ID of an adopted sandbox; the rest is the
// container's short ID, so Get can find it again without labels.
const adoptedPrefix = "ext-"

// attachExisting adopts the container spec.Existing names (an ID, a prefix
// of one, or a name).
func (b *Backend) attachExisting(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	s, err := b.adopt(ctx, spec.Existing, "container_id "+spec.Existing)
	if err != nil {
		return nil, b.opErr("attach", "", err)
	}
	s.name = spec.Name
	if spec.Build != nil || spec.Image != "" || spec.Command != nil || len(spec.Volumes) > 0 || len(spec.Ports) > 0 {
		b.log.Debug("attaching to an existing container: the entry's image, build, command, volumes and ports are not used",
			"container", spec.Existing)
	}
	b.log.Debug("attached to existing container", "id", s.id, "container", s.cid, "sbxd", !s.plain)
	return s, nil
}

// adopt inspects the container ref, checks that it runs and makes sure it
// has sbxd (else the sandbox runs plain execs).
func (b *Backend) adopt(ctx context.Context, ref, what string) (*Sandbox, error) {
	c, err := b.cli.ContainerInspect(ctx, ref)
	if err != nil {
		err = b.translate(err)
		if errors.Is(err, backend.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s: no such container on the engine at %s (docker ps lists them)", backend.ErrNotFound, what, b.cli.DaemonHost())
		}
		return nil, err
	}
	state := "unknown"
	if c.State != nil {
		state = c.State.Status
	}
	if state != "running" {
		return nil, fmt.Errorf("%w: %s: container %s is %s, not running (start it with docker start %s, or unpause it)",
			backend.ErrInvalidConfig, what, strings.TrimPrefix(c.Name, "/"), state, strings.TrimPrefix(c.Name, "/"))
	}
	s := &Sandbox{b: b, id: adoptedPrefix + c.ID[:min(12, len(c.ID))], cid: c.ID, workDir: workDirOf(c), adopted: true}
	if c.HostConfig != nil {
		s.runtime = c.HostConfig.Runtime
	}
	if err := b.ensureSbxd(ctx, s); err != nil {
		s.plain = true
		b.log.Warn("no sbxd in the existing container: commands run as plain execs, and a timeout or cancel cannot kill them inside it",
			"container", strings.TrimPrefix(c.Name, "/"), "err", err)
	}
	return s, nil
}

// ensureSbxd finds sbxd in the adopted container or copies it in, and
// checks that it runs there.
func (b *Backend) ensureSbxd(ctx context.Context, s *Sandbox) error {
	st, err := b.cli.ContainerStatPath(ctx, s.cid, sbxdPath)
	if err != nil || !st.Mode.IsRegular() || st.Size == 0 {
		facts, err := b.facts(ctx)
		if err != nil {
			return err
		}
		bin, err := sbxdbin.Lookup(b.cfg.SbxdPath, facts.arch)
		if err != nil {
			return err
		}
		tr, err := sbxdTar(bin, ".sbx/")
		if err != nil {
			return err
		}
		if err := b.cli.CopyToContainer(ctx, s.cid, "/", tr, container.CopyToContainerOptions{}); err != nil {
			return fmt.Errorf("copying sbxd into the container: %w", b.translate(err))
		}
	}
	// It must run there too (architecture, noexec mounts).
	res, err := s.Exec(ctx, backend.ExecRequest{Cmd: []string{sbxdPath, "ls", sbxdDir}, User: "0"})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s does not run in the container (exit code %d): %s", sbxdPath, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

// Adopted reports whether the sandbox is a container sandboxkit did not
// make (Spec.Existing), and Wrapped whether its commands run under sbxd.
func (s *Sandbox) Adopted() (adopted, wrapped bool) { return s.adopted, !s.plain }
