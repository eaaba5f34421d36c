package lite

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

var _ backend.Labeler = (*Backend)(nil)

// SetLabels changes a sandbox's labels in its record (backend.Labeler).
func (b *Backend) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	return statedir.SetLabels(b.dir, Name, id, labels, func(m *meta) *map[string]string { return &m.Labels })
}
