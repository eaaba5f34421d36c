package native

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandboxkit/sandboxkit/backend"
)

func TestContainerName(t *testing.T) {
	for _, c := range []struct {
		session, name, want string
	}{
		{"s1", "main", "sbx-s1-main-abc"},
		{"", "main", "sbx-main-abc"},
		{"", "", "sbx-abc"},
		{"my task/1", "gdb_mcp", "sbx-my-task-1-gdb_mcp-abc"},
		{"..", "-x-", "sbx-x-abc"},
	} {
		if got := containerName(backend.Spec{Session: c.session, Name: c.name}, "abc"); got != c.want {
			t.Errorf("containerName(%q, %q) = %q, want %q", c.session, c.name, got, c.want)
		}
	}
}

func TestGPURequest(t *testing.T) {
	r, err := gpuRequest("all")
	if err != nil || r.Count != -1 {
		t.Errorf("all: %+v %v", r, err)
	}
	r, err = gpuRequest("2")
	if err != nil || r.Count != 2 {
		t.Errorf("2: %+v %v", r, err)
	}
	r, err = gpuRequest("GPU-a,GPU-b")
	if err != nil || fmt.Sprint(r.DeviceIDs) != "[GPU-a GPU-b]" || r.Count != 0 {
		t.Errorf("ids: %+v %v", r, err)
	}
	if _, err := gpuRequest("0"); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Errorf("0: %v", err)
	}
	if fmt.Sprint(r.Capabilities) != "[[gpu]]" {
		t.Errorf("capabilities %v", r.Capabilities)
	}
}

// Every address the loopback allocator hands out is in 127.0.0.0/8 but not
// 127.0.0.x, and not a .0 or .255 host; distinct inputs in range map to
// distinct addresses.
func TestLoopbackAt(t *testing.T) {
	prefix := netip.MustParsePrefix("127.0.0.0/8")
	seen := map[string]uint32{}
	for _, n := range []uint32{0, 1, 253, 254, 255, 65535, loopbackSpace - 1, loopbackSpace, 1 << 31, ^uint32(0)} {
		a := netip.MustParseAddr(loopbackAt(n))
		b := a.As4()
		if !prefix.Contains(a) || b[1] == 0 || b[3] == 0 || b[3] == 255 {
			t.Errorf("loopbackAt(%d) = %s", n, a)
		}
		if prev, ok := seen[a.String()]; ok && prev%loopbackSpace != n%loopbackSpace {
			t.Errorf("loopbackAt(%d) = loopbackAt(%d) = %s", n, prev, a)
		}
		seen[a.String()] = n
	}
	if got := loopbackAt(0); got != "127.1.0.1" {
		t.Errorf("loopbackAt(0) = %s", got)
	}
	if got := loopbackAt(loopbackSpace - 1); got != "127.255.255.254" {
		t.Errorf("loopbackAt(last) = %s", got)
	}
}

func TestTranslate(t *testing.T) {
	b := &Backend{}
	for _, c := range []struct {
		in   error
		want error
	}{
		{cerrdefs.ErrNotFound.WithMessage("No such container: x"), backend.ErrNotFound},
		{cerrdefs.ErrInvalidArgument.WithMessage("bad"), backend.ErrInvalidConfig},
		{cerrdefs.ErrConflict.WithMessage(`name "x" is already in use`), backend.ErrAlreadyExists},
		{cerrdefs.ErrNotImplemented, errors.ErrUnsupported},
		// Podman's answer (500) to a kill racing its own auto-remove.
		{cerrdefs.ErrUnknown.WithMessage(`no container with name or ID "x" found: no such container`), backend.ErrNotFound},
	} {
		got := b.translate(c.in)
		if !errors.Is(got, c.want) {
			t.Errorf("translate(%v) = %v, want %v", c.in, got, c.want)
		}
		if errors.Is(got, cerrdefs.ErrNotFound) || errors.Is(got, cerrdefs.ErrInvalidArgument) {
			t.Errorf("translate(%v) leaks the SDK's error type", c.in)
		}
	}
	// A conflict that is not about a name is no ErrAlreadyExists.
	if got := b.translate(cerrdefs.ErrConflict.WithMessage("container x is not running")); errors.Is(got, backend.ErrAlreadyExists) {
		t.Errorf("not running: %v", got)
	}
	// Already translated errors pass through.
	pe := fmt.Errorf("x: %w", backend.ErrNotFound)
	if got := b.translate(pe); got != pe {
		t.Errorf("translated twice: %v", got)
	}
}

func TestStateOf(t *testing.T) {
	for in, want := range map[container.ContainerState]backend.State{
		"running": backend.StateRunning, "paused": backend.StatePaused, "exited": backend.StateExited,
		"created": backend.StateCreating, "dead": backend.StateExited, "weird": backend.StateUnknown,
	} {
		if got := stateOf(string(in)); got != want {
			t.Errorf("stateOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBaseImages(t *testing.T) {
	df := "# syntax=docker/dockerfile:1\n" +
		"ARG V=1\n" +
		"FROM --platform=linux/amd64 golang:1.26 AS build\n" +
		"FROM build AS test\n" +
		"from debian:12 \\\n  as final\n" +
		"FROM scratch\n" +
		"FROM alpine:$V\n" +
		"FROM golang:1.26\n" +
		"RUN echo FROM nothing\n"
	got := fmt.Sprint(baseImages([]byte(df)))
	if got != "[golang:1.26 debian:12]" {
		t.Errorf("baseImages = %s", got)
	}
}
