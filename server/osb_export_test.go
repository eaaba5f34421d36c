package server

import "time"

// SetOSBPingEvery sets how often a command's stream carries a ping event
// and returns a func restoring it. Tests that call it must not run in
// parallel with others that stream commands.
func SetOSBPingEvery(d time.Duration) (restore func()) {
	old := osbPingEvery
	osbPingEvery = d
	return func() { osbPingEvery = old }
}
