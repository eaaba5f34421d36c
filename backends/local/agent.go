package local

import (
	"context"
	"path/filepath"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// AgentHome is the folder for an sbxd agent of this sandbox (its binary and
// its background jobs' output): inside the sandbox's state folder, next to
// (not inside) its working folder, so it goes with the sandbox and is not
// shared with other sandboxes or users through /tmp (sbxd.AgentHomer).
func (s *Sandbox) AgentHome() string { return filepath.Join(s.dir, "agent") }

var _ backend.Labeler = (*Backend)(nil)

// SetLabels changes a sandbox's labels in its record (backend.Labeler).
func (b *Backend) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	return statedir.SetLabels(b.dir, Name, id, labels, func(m *meta) *map[string]string { return &m.Labels })
}

var _ backend.Claimer = (*Backend)(nil)

// Claim takes a pool member under its record's lock (backend.Claimer).
func (b *Backend) Claim(ctx context.Context, id string, c backend.Claim) (backend.Info, error) {
	return statedir.Claim(b.dir, Name, id, c, func(m *meta) statedir.ClaimFields {
		return statedir.ClaimFields{Labels: &m.Labels, Owner: &m.Owner, Session: &m.Session, ExpiresAt: &m.ExpiresAt,
			Removing: m.Removing, Info: m.info}
	})
}
