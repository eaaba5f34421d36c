package server_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
)

// fakeIsolatedBackend is a local backend that claims an isolation level: the
// server's texts and checks depend only on the claim, and this machine's
// isolating backends need Docker or root.
type fakeIsolatedBackend struct {
	backend.Backend
	iso backend.Isolation
}

func (f fakeIsolatedBackend) Capabilities() backend.Capabilities {
	c := f.Backend.Capabilities()
	c.Isolation = f.iso
	return c
}

func TestCheckUnisolatedListen(t *testing.T) {
	local := localBackend(t)
	container := fakeIsolatedBackend{local, backend.IsolationContainer}
	for _, c := range []struct {
		addr            string
		b               backend.Backend
		allow           bool
		wantErrContains string
	}{
		{"127.0.0.1:8765", local, false, ""},
		{"localhost:8765", local, false, ""},
		{"[::1]:8765", local, false, ""},
		{"0.0.0.0:8765", local, false, "--allow-unisolated"},
		{":8765", local, false, "the local backend gives no isolation"},
		{"192.168.1.5:8765", local, false, "not loopback"},
		{"0.0.0.0:8765", local, true, ""},
		{"0.0.0.0:8765", container, false, ""},
		{"8765", local, false, "want host:port"},
	} {
		err := server.CheckUnisolatedListen(c.addr, c.b, c.allow)
		if c.wantErrContains == "" {
			assert.NoError(t, err, c.addr)
		} else if assert.Error(t, err, c.addr) {
			assert.Contains(t, err.Error(), c.wantErrContains, c.addr)
		}
	}
	assert.Contains(t, server.UnisolatedWarning(local), "no isolation")
	assert.Empty(t, server.UnisolatedWarning(container))
}
