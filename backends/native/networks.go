package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Session networks (backend.NetworkManager) are bridge networks carrying
// the contract's labels plus labelNetwork. A sandbox whose Spec.Network
// names one joins it with its Spec.Name as a network alias, so the other
// members reach it as "neo4j", "main", ... through the engine's DNS.
const labelNetwork = "sandboxkit.native.network"

var (
	_ backend.NetworkManager = (*Backend)(nil)
	_ backend.LogReader      = (*Sandbox)(nil)
)

// CreateNetwork makes a labelled bridge network. A name that exists
// already gives an error wrapping backend.ErrAlreadyExists.
func (b *Backend) CreateNetwork(ctx context.Context, spec backend.NetworkSpec) (string, error) {
	b.settle(ctx)
	fail := func(err error) (string, error) { return "", b.opErr("create network", "", err) }
	id := newID()
	name := spec.Name
	if name == "" {
		name = containerName(backend.Spec{Session: spec.Session, Name: "net"}, id)
	}
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[backend.LabelID] = id
	labels[backend.LabelBackend] = Name
	labels[labelNetwork] = "shared"
	if spec.Session != "" {
		labels[backend.LabelSession] = spec.Session
	}
	if spec.TTL > 0 {
		labels[backend.LabelExpiresAt] = time.Now().Add(spec.TTL).UTC().Format(time.RFC3339)
	}
	if _, err := b.cli.NetworkInspect(ctx, name, network.InspectOptions{}); err == nil {
		return fail(fmt.Errorf("%w: network %s exists already", backend.ErrAlreadyExists, name))
	}
	if _, err := b.cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: labels}); err != nil {
		return fail(fmt.Errorf("network %s: %w", name, b.translate(err)))
	}
	return name, nil
}

// RemoveNetwork removes a network CreateNetwork made; one that is gone is
// not an error. Networks sandboxkit did not make are refused.
func (b *Backend) RemoveNetwork(ctx context.Context, name string) error {
	b.settle(ctx)
	fail := func(err error) error { return b.opErr("remove network", "", err) }
	n, err := b.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		if err := b.translate(err); errors.Is(err, backend.ErrNotFound) {
			return nil
		} else {
			return fail(err)
		}
	}
	if n.Labels[backend.LabelBackend] != Name || n.Labels[labelNetwork] == "" {
		return fail(fmt.Errorf("%w: network %s was not made by sandboxkit's CreateNetwork; not removing it", backend.ErrInvalidConfig, name))
	}
	if err := b.cli.NetworkRemove(ctx, n.ID); err != nil {
		if err := b.translate(err); !errors.Is(err, backend.ErrNotFound) {
			return fail(fmt.Errorf("network %s: %w", name, err))
		}
	}
	return nil
}

// ListNetworks lists the networks CreateNetwork made, filtered on the
// engine.
func (b *Backend) ListNetworks(ctx context.Context, filter backend.Filter) ([]backend.NetworkInfo, error) {
	b.settle(ctx)
	args := labelFilter(filter, labelNetwork)
	list, err := b.cli.NetworkList(ctx, network.ListOptions{Filters: args})
	if err != nil {
		return nil, b.opErr("list networks", "", err)
	}
	var out []backend.NetworkInfo
	for _, n := range list {
		if !matchLabels(n.Labels, args) {
			continue
		}
		info := backend.NetworkInfo{Name: n.Name, Session: n.Labels[backend.LabelSession], Labels: maps.Clone(n.Labels), CreatedAt: n.Created}
		info.ExpiresAt, _ = time.Parse(time.RFC3339, n.Labels[backend.LabelExpiresAt])
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b backend.NetworkInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// networkingConfig gives a sandbox on a named (user-defined) network its
// Spec.Name as an alias there; nil for the engine's own modes.
func networkingConfig(spec backend.Spec) *network.NetworkingConfig {
	n := spec.Network
	switch {
	case spec.Name == "", n == "", n == "none", n == "bridge", n == "host", n == "default",
		strings.HasPrefix(n, "container:"):
		return nil
	}
	return &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		n: {Aliases: []string{spec.Name}},
	}}
}

// Logs returns the container's output (its main process's stdout and
// stderr), the last tail lines when tail > 0.
func (s *Sandbox) Logs(ctx context.Context, tail int) ([]byte, error) {
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true}
	if tail > 0 {
		opts.Tail = strconv.Itoa(tail)
	}
	rc, err := s.b.cli.ContainerLogs(ctx, s.cid, opts)
	if err != nil {
		return nil, s.opErr("logs", err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil {
		return buf.Bytes(), s.opErr("logs", err)
	}
	return buf.Bytes(), nil
}
