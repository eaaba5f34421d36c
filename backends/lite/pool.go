package lite

import (
	"cmp"
	"context"
	"slices"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

var _ backend.Claimer = (*Backend)(nil)

// Claim takes a pool member under its record's lock (backend.Claimer),
// the lock every other writer of the record takes too (Backend.update).
// A member still being made (Create has not finished) or being removed is
// not claimable: ErrClaimed.
func (b *Backend) Claim(ctx context.Context, id string, c backend.Claim) (backend.Info, error) {
	return statedir.Claim(b.dir, Name, id, c, func(m *meta) statedir.ClaimFields {
		return statedir.ClaimFields{Labels: &m.Labels, Owner: &m.Owner, Session: &m.Session, ExpiresAt: &m.ExpiresAt,
			Removing: m.Removing || m.Creator != "", Info: m.info}
	})
}

// cleanResetCaps are the capabilities a sandbox may have and still be
// reset clean: Docker's default set, whose effects stay in the sandbox's
// namespaces and files, and CAP_NET_ADMIN, whose do too when the sandbox
// has a network namespace of its own (every generation gets a new one).
var cleanResetCaps = append(slices.Clone(defaultCaps), "CAP_NET_ADMIN")

// CleanReset reports whether Reset of a sandbox made from spec leaves
// nothing of what ran in it before that a later command could see: no
// file, process, environment or network state. Capabilities.CleanReset
// is false because this depends on the Spec; a warm pool asks this
// instead (see TestResetCrossesNoState for what is checked).
//
// A Reset throws away everything a task can change in a sandbox of a
// clean Spec: the writable layer (files, /tmp, /run, /etc/profile...),
// the container with its pid, mount, ipc, uts and network namespaces and
// its cgroup (processes however detached, /dev/shm, message queues,
// listening sockets, addresses, routes and firewall rules, mounts), and
// what the agent's folder holds; the next generation starts from the same
// OCI config, so the agent's and every command's environment is the
// image's and the entry's again. It is not clean for a sandbox
//   - on the host's network: the namespace is the host's and outlives the
//     sandbox (so does what a task leaves in a service on the host it
//     reaches over loopback);
//   - privileged, or with a capability beyond cleanResetCaps: with
//     CAP_SYS_ADMIN, say, a task can mount the host's cgroup hierarchy;
//   - without the seccomp filter (security_opt seccomp=unconfined): a
//     task can then add keys to the kernel keyrings of its user, which are
//     shared with the host (no user namespace as root);
//   - with a writable bind volume, which Reset leaves as it is.
func (b *Backend) CleanReset(spec backend.Spec) bool {
	network := cmp.Or(spec.Network, b.cfg.network())
	// An egress network outlives Resets (its enforcer's connections, its
	// namespace's neighbour and conntrack state), so it is not a clean
	// slate.
	if network != NetworkNone || spec.Privileged || spec.Egress != nil {
		return false
	}
	caps, err := capabilities(spec)
	if err != nil {
		return false
	}
	for _, c := range caps {
		if !slices.Contains(cleanResetCaps, c) {
			return false
		}
	}
	if _, seccomp, err := securityOptions(spec); err != nil || !seccomp {
		return false
	}
	for _, v := range spec.Volumes {
		if !v.ReadOnly {
			return false
		}
	}
	return true
}
