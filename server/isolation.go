package server

import (
	"fmt"

	"github.com/sandboxkit/sandboxkit/backend"
)

// FlagAllowUnisolated is the sbx serve flag that allows listening on a
// non-loopback address with a backend that gives no isolation.
const FlagAllowUnisolated = "--allow-unisolated"

// Unisolated reports whether b runs sandboxes without isolation (the local
// backend: host processes).
func Unisolated(b backend.Backend) bool {
	return b.Capabilities().Isolation == backend.IsolationNone
}

// UnisolatedWarning is what sbx serve and sbx mcp print at start on a
// backend without isolation, and "" on any other.
func UnisolatedWarning(b backend.Backend) string {
	if !Unisolated(b) {
		return ""
	}
	return fmt.Sprintf("the %s backend gives no isolation: agents' commands run as host processes with this user's rights "+
		"and can read and change whatever this user can (file tools are confined to each sandbox's folder; commands are not). "+
		`For isolation set [sandbox] backend = "native" (Docker) or "lite" (runc)`, b.Name())
}

// CheckUnisolatedListen refuses to listen on anything but loopback with a
// backend without isolation, whatever the API key, unless allow is set
// (FlagAllowUnisolated): whoever reaches the address could run commands on
// this host.
func CheckUnisolatedListen(addr string, b backend.Backend, allow bool) error {
	host, _, err := splitListen(addr)
	if err != nil {
		return err
	}
	if allow || isLoopback(host) || !Unisolated(b) {
		return nil
	}
	return fmt.Errorf("listen address %q is not loopback and the %s backend gives no isolation: "+
		"whoever can reach the server could run commands on this host as this user. "+
		"Listen on 127.0.0.1, use an isolating backend (native, lite, k8s, ...), or pass %s if that is what you want",
		addr, b.Name(), FlagAllowUnisolated)
}
