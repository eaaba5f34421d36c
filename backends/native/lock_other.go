//go:build !unix

package native

import "sync"

var loopbackMu sync.Mutex

// lockFile, where flock is missing, serialises allocation within this
// process only.
func lockFile(string) (func(), error) {
	loopbackMu.Lock()
	return loopbackMu.Unlock, nil
}
