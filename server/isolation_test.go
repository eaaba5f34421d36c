package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
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

// TestToolTextsSayWhatIsIsolated: the tool descriptions and instructions
// agents read say what the backend isolates, over MCP and GET /tools.
func TestToolTextsSayWhatIsIsolated(t *testing.T) {
	local := localBackend(t)
	for _, c := range []struct {
		name     string
		b        backend.Backend
		want     map[string]string // tool (or "instructions") -> text it contains
		unwanted []string          // in no text
	}{
		{"local", local, map[string]string{
			"instructions":   "without isolation",
			"create_sandbox": "a folder on the server's host, without isolation",
			"execute":        "runs as a host process and is not confined",
			"read_file":      "Only paths inside the sandbox's folder",
			"glob":           "Only paths inside the sandbox's folder",
		}, []string{"isolated machine"}},
		{"container", fakeIsolatedBackend{local, backend.IsolationContainer}, map[string]string{
			"instructions":   "isolated container",
			"create_sandbox": "isolated container",
		}, []string{"isolated machine", "without isolation", "not confined", "Only paths inside"}},
		{"vm", fakeIsolatedBackend{local, backend.IsolationVM}, map[string]string{
			"create_sandbox": "isolated virtual machine",
		}, []string{"without isolation"}},
		{"gvisor", fakeIsolatedBackend{local, backend.IsolationGVisor}, map[string]string{
			"instructions":   "gVisor",
			"create_sandbox": "isolated gVisor container",
		}, []string{"without isolation", "not confined"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, c.b, nil)
			url := serveHTTP(t, s)
			cs := mcpClient(t, url+"/mcp", nil)
			texts := map[string]string{"instructions": cs.InitializeResult().Instructions}
			list, err := cs.ListTools(context.Background(), nil)
			require.NoError(t, err)
			for _, tl := range list.Tools {
				texts[tl.Name] = tl.Description
			}
			resp, err := http.Get(url + "/tools")
			require.NoError(t, err)
			defer resp.Body.Close()
			var httpTools []struct{ Name, Description string }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&httpTools))
			require.Len(t, httpTools, len(list.Tools))
			for _, tl := range httpTools {
				assert.Equal(t, texts[tl.Name], tl.Description, "GET /tools and MCP describe %s alike", tl.Name)
			}
			for name, want := range c.want {
				assert.Contains(t, texts[name], want, name)
			}
			for name, text := range texts {
				for _, bad := range c.unwanted {
					assert.NotContains(t, text, bad, name)
				}
			}
			// create_sandbox's answer says the sandbox's isolation.
			created := servertest.Must(t, servertest.MCP(cs), "create_sandbox", map[string]any{})
			assert.Contains(t, created, "isolation "+string(c.b.Capabilities().Isolation)+":")
		})
	}
}
