package native

import (
	"context"
	"time"
)

// SetEnforcerGrace sets how long PruneCaches leaves an enforcer without a
// sandbox alone while its creator lives, for a test; it returns the undo.
func SetEnforcerGrace(d time.Duration) (undo func()) {
	old := enforcerGrace
	enforcerGrace = d
	return func() { enforcerGrace = old }
}

// SparesReady is how many started spare enforcers b holds.
func (b *Backend) SparesReady() int {
	if b.spares == nil {
		return 0
	}
	b.spares.mu.Lock()
	defer b.spares.mu.Unlock()
	n := 0
	for _, ids := range b.spares.ready {
		n += len(ids)
	}
	return n
}

// SetEngineSave makes b's image saves go through the engine only (true)
// or read the engine's files where it can (false, the default).
func (b *Backend) SetEngineSave(on bool) { b.engineSave = on }

// StoreSaveError is why b's image save of refs would go through the
// engine (nil: it reads the engine's files).
func (b *Backend) StoreSaveError(ctx context.Context, refs []string) error {
	_, err := b.storeImages(ctx, refs)
	return err
}
