package native

import "time"

// SetEnforcerGrace sets how long PruneCaches leaves an enforcer without a
// sandbox alone while its creator lives, for a test; it returns the undo.
func SetEnforcerGrace(d time.Duration) (undo func()) {
	old := enforcerGrace
	enforcerGrace = d
	return func() { enforcerGrace = old }
}
