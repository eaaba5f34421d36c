package native

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxkit/sandboxkit/backend"
)

// The "loopback" ports mode gives each session an address of its own in
// 127.0.0.0/8 and publishes its sandboxes' ports there unchanged, so
// several sessions can each have a service on port 7687.
//
// The engine is the record of which address belongs to which session (the
// labelLoopback label on the session's containers); a lock file on this
// host makes choosing an address and creating the container that claims it
// one step for concurrent processes. The first address tried is a hash of
// the session, so a session keeps its address across restarts of the host
// program once its first sandbox is gone too.
const labelLoopback = "sandboxkit.native.loopback"

// loopbackLockPath is the host-wide lock for address allocation.
var loopbackLockPath = filepath.Join(os.TempDir(), "sandboxkit-native-loopback.lock")

func (b *Backend) createOnLoopback(ctx context.Context, spec backend.Spec, id string, cfg *container.Config, hc *container.HostConfig, name string) (container.CreateResponse, error) {
	unlock, err := b.bindLoopback(ctx, spec, id, cfg, hc)
	if err != nil {
		return container.CreateResponse{}, err
	}
	defer unlock()
	return b.cli.ContainerCreate(ctx, cfg, hc, networkingConfig(spec), platformOf(spec), name)
}

// bindLoopback gives the container of cfg and hc, which publishes the
// ports of sandbox id (the sandbox's, or its egress enforcer's), the
// session's loopback address, under the host-wide lock: the caller
// creates the container, which claims the address, and then calls unlock.
func (b *Backend) bindLoopback(ctx context.Context, spec backend.Spec, id string, cfg *container.Config, hc *container.HostConfig) (unlock func(), err error) {
	unlock, err = lockFile(loopbackLockPath)
	if err != nil {
		return nil, fmt.Errorf("loopback ports: %w", err)
	}
	session := spec.Session
	if session == "" {
		session = "sandbox-" + id // a session of its own
	}
	addr, err := b.loopbackAddr(ctx, session)
	if err != nil {
		unlock()
		return nil, err
	}
	cfg.Labels[labelLoopback] = addr
	for port, binds := range hc.PortBindings {
		for i := range binds {
			if binds[i].HostIP == "127.0.0.1" && binds[i].HostPort == "" {
				// The entry left both to us: the session's address, the
				// sandbox's port.
				binds[i].HostIP, binds[i].HostPort = addr, port.Port()
			}
		}
		hc.PortBindings[port] = binds
	}
	return unlock, nil
}

// loopbackAddr returns the session's address: the one its containers
// carry, else the first free one from the session's hash.
func (b *Backend) loopbackAddr(ctx context.Context, session string) (string, error) {
	args := filters.NewArgs(filters.Arg("label", backend.LabelBackend+"="+Name), filters.Arg("label", labelLoopback))
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return "", b.translate(err)
	}
	taken := map[string]bool{}
	for _, c := range list {
		if !matchLabels(c.Labels, args) {
			continue
		}
		addr := c.Labels[labelLoopback]
		s := c.Labels[backend.LabelSession]
		if s == "" {
			// An enforcer publishes its sandbox's ports.
			s = "sandbox-" + cmp(c.Labels[backend.LabelID], c.Labels[labelEgressFor])
		}
		if s == session {
			return addr, nil
		}
		taken[addr] = true
	}
	h := fnv.New32a()
	h.Write([]byte(session))
	start := h.Sum32()
	for i := uint32(0); i < loopbackSpace; i++ {
		addr := loopbackAt(start + i)
		if !taken[addr] {
			return addr, nil
		}
	}
	return "", fmt.Errorf("%w: loopback ports: every address in 127.1.0.1-127.255.255.254 is taken", backend.ErrUnavailable)
}

// loopbackSpace counts the addresses used: 127.1.0.0 to 127.255.255.255
// without network and broadcast-looking .0 and .255 hosts.
const loopbackSpace = 255 * 256 * 254

// loopbackAt maps n onto that space.
func loopbackAt(n uint32) string {
	n %= loopbackSpace
	host := n%254 + 1
	n /= 254
	mid := n % 256
	top := n/256 + 1
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], 127<<24|top<<16|mid<<8|host)
	return netip.AddrFrom4(a).String()
}
