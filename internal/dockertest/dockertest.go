// Package dockertest holds what sandboxkit's Docker tests share: finding a
// daemon (skip when none answers, fail when SBX_REQUIRE_DOCKER=1), the names
// of the local test images that scripts/docker-setup.sh builds, a registry
// on loopback for pull tests, and a check that a test run left no labelled
// containers, volumes, networks or images behind.
package dockertest

import (
	"context"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/internal/harness"
)

// Images built by scripts/docker-setup.sh; no registry is involved.
const (
	// BusyboxImage: busybox-static and its applet links.
	BusyboxImage = "sandboxkit-test/busybox:1"
	// ScratchImage: nothing but /testbin (internal/dockertest/testbin); its
	// CMD serves TCP on 8080.
	ScratchImage = "sandboxkit-test/scratch:1"
	// DebianImage: debootstrap minbase with bash, coreutils and python3.
	DebianImage = "sandboxkit-test/debian:1"
)

// EnvRequire makes tests that need Docker fail instead of skipping when no
// daemon answers or a test image is missing (CI sets it).
const EnvRequire = "SBX_REQUIRE_DOCKER"

// Required reports whether SBX_REQUIRE_DOCKER asks for Docker.
func Required() bool { return harness.Required(EnvRequire) }

// unavailable skips t, or fails it when Docker is required.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	harness.Unavailable(t, EnvRequire, format, args...)
}

// Client returns a client for the daemon DOCKER_HOST names (default: the
// local socket), or skips t when none answers (fails with
// SBX_REQUIRE_DOCKER=1). The client is closed when t ends.
func Client(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		unavailable(t, "docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		unavailable(t, "no Docker daemon answers at %s: %v (run scripts/docker-setup.sh)", cli.DaemonHost(), err)
	}
	return cli
}

// RequireImage skips t (fails with SBX_REQUIRE_DOCKER=1) when ref is not
// present on the daemon.
func RequireImage(t testing.TB, cli *client.Client, ref string) {
	t.Helper()
	if _, err := cli.ImageInspect(context.Background(), ref); err != nil {
		unavailable(t, "test image %s is missing (run scripts/docker-setup.sh): %v", ref, err)
	}
}

// Leftovers lists the containers, volumes, networks and images carrying
// label key=value, as "kind name" strings.
func Leftovers(ctx context.Context, cli *client.Client, key, value string) ([]string, error) {
	f := filters.NewArgs(filters.Arg("label", key+"="+value))
	if err := SettleAutoRemove(ctx, cli, f); err != nil {
		return nil, err
	}
	var out []string
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		out = append(out, "container "+strings.TrimPrefix(strings.Join(c.Names, ","), "/")+" ("+c.State+")")
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, err
	}
	for _, v := range vs.Volumes {
		out = append(out, "volume "+v.Name)
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		out = append(out, "network "+n.Name)
	}
	is, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	for _, i := range is {
		out = append(out, "image "+strings.Join(append(i.RepoTags, i.ID), ","))
	}
	return out, nil
}

// SettleAutoRemove waits (within ctx, at most 30 s) until no container
// matching f has an auto-remove the engine has yet to finish (sbx run's
// sandboxes: backend.Discarder returns once the signal is sent, before the
// container has stopped, let alone been removed). What is left after that
// is left.
func SettleAutoRemove(ctx context.Context, cli *client.Client, f filters.Args) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		if err != nil {
			return err
		}
		pending := false
		for _, c := range cs {
			if in, err := cli.ContainerInspect(ctx, c.ID); err == nil && in.HostConfig != nil && in.HostConfig.AutoRemove {
				pending = true
			}
		}
		if !pending {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // what is left is reported as left
		case <-time.After(20 * time.Millisecond): // polls a condition
		}
	}
}

// ImageRemover returns a function removing an image from cli's engine (an
// image that is gone is not an error), for backendtest.WithImageRemover.
func ImageRemover(cli *client.Client) func(ctx context.Context, ref string) error {
	return func(ctx context.Context, ref string) error {
		_, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		return err
	}
}

// AssertNoLeftovers registers a cleanup, run after every cleanup registered
// later (so after the sandboxes' own Destroy), that fails t when anything
// labelled key=value still exists.
func AssertNoLeftovers(t testing.TB, cli *client.Client, key, value string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		left, err := Leftovers(ctx, cli, key, value)
		if err != nil {
			t.Errorf("listing leftovers labelled %s=%s: %v", key, value, err)
			return
		}
		for _, l := range left {
			t.Errorf("left behind: %s (label %s=%s)", l, key, value)
		}
	})
}
