package lite

import (
	"context"

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
