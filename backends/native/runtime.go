package native

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Runtime levels (backend.RuntimeGVisor, ...) map to the engine's runtime
// that gives them, found among the runtimes the engine reports by the
// usual names: gVisor is registered as "runsc" (gVisor's own docs), Kata
// as "kata-runtime", "kata" or "io.containerd.kata.v2", Kata with
// Firecracker as "kata-fc". An engine's own runtime names are taken as
// they are.

// runtimeHint tells how to give an engine gVisor, for refusals.
const runtimeHint = `to give a Docker engine gVisor, install runsc and add {"runtimes": {"runsc": {"path": "/usr/bin/runsc"}}} ` +
	`to /etc/docker/daemon.json, then reload dockerd (kill -HUP); Podman: runsc = ["/usr/bin/runsc"] under [engine.runtimes] in containers.conf`

// podmanRuntimeHint says why Podman offers no runtime to choose.
const podmanRuntimeHint = "Podman's Docker-compatible API ignores a container's runtime and runs every container on its default; " +
	`to run them all under gVisor, set runtime = "runsc" under [engine] in Podman's containers.conf (the isolation shown then says gvisor)`

// levelRuntime is the engine runtime of engine's (sorted) runtimes that
// gives level, preferring the usual name; "" when none does.
func levelRuntime(level string, engine []string) string {
	var want backend.Isolation
	var usual []string
	switch level {
	case backend.RuntimeRunc:
		if slices.Contains(engine, "runc") {
			return "runc"
		}
		return ""
	case backend.RuntimeGVisor:
		want, usual = backend.IsolationGVisor, []string{"runsc", "gvisor"}
	case backend.RuntimeKata:
		want, usual = backend.IsolationVM, []string{"kata-runtime", "kata", "io.containerd.kata.v2", "kata-qemu"}
	case backend.RuntimeFirecracker:
		want, usual = backend.IsolationVM, []string{"kata-fc", "firecracker"}
	default:
		return ""
	}
	for _, name := range usual {
		if slices.Contains(engine, name) {
			return name
		}
	}
	for _, name := range engine {
		if backend.RuntimeIsolation(name) != want {
			continue
		}
		// Firecracker's Kata flavour is kata-fc; plain Kata is any other.
		fc := strings.Contains(name, "fc") || strings.Contains(name, "firecracker")
		if fc == (level == backend.RuntimeFirecracker) || want == backend.IsolationGVisor {
			return name
		}
	}
	return ""
}

// offeredRuntimes is what a Spec.Runtime may name on an engine with these
// runtimes: their names and the levels they give.
func offeredRuntimes(engine []string) []string {
	out := slices.Clone(engine)
	for _, level := range []string{backend.RuntimeRunc, backend.RuntimeGVisor, backend.RuntimeKata, backend.RuntimeFirecracker} {
		if levelRuntime(level, engine) != "" && !slices.Contains(out, level) {
			out = append(out, level)
		}
	}
	return out
}

// runtimeFor is the engine runtime a sandbox of spec runs with ("" for
// the engine's default): Spec.Runtime, else the config's, a level mapped
// to the engine's runtime for it. A level or name the engine lacks is
// refused, saying which it has and how to add gVisor.
func (b *Backend) runtimeFor(ctx context.Context, spec backend.Spec) (string, error) {
	name := cmp(spec.Runtime, b.cfg.Runtime)
	if name == "" {
		return "", nil
	}
	f, err := b.waitFacts(ctx, true)
	if err != nil {
		// Without the engine's answer, pass the name on: the engine
		// refuses one it lacks.
		return name, nil
	}
	if f.podman {
		return "", fmt.Errorf("%w: runtime %q: %s", errors.ErrUnsupported, name, podmanRuntimeHint)
	}
	if slices.Contains(f.runtimes, name) {
		return name, nil
	}
	if rt := levelRuntime(name, f.runtimes); rt != "" {
		return rt, nil
	}
	key := "runtime"
	if spec.Runtime == "" {
		key = "[sandbox.native] runtime"
	}
	return "", fmt.Errorf("%w: %s %q: the Docker engine at %s has no such runtime (it has %s); %s",
		errors.ErrUnsupported, key, name, b.cli.DaemonHost(), strings.Join(f.runtimes, ", "), runtimeHint)
}

// checkSpec is what Create refuses a Spec for before it asks the engine.
func (b *Backend) checkSpec(spec backend.Spec) error {
	if err := b.Capabilities().Check(Name, spec); err != nil {
		return err
	}
	return b.checkEgress(spec)
}

// CheckSpec runs Create's checks of spec, making nothing (see
// backend.SpecChecker): the capabilities, the egress policy and the
// runtime the engine must have.
func (b *Backend) CheckSpec(ctx context.Context, spec backend.Spec) error {
	if err := b.checkSpec(spec); err != nil {
		return b.opErr("check", "", err)
	}
	if spec.Existing == "" {
		if _, err := b.runtimeFor(ctx, spec); err != nil {
			return b.opErr("check", "", err)
		}
	}
	return nil
}

var _ backend.SpecChecker = (*Backend)(nil)
