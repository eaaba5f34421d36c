package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/server"
)

const (
	observeAPIKey   = "agent-key-7d1e0c"
	observeAdminKey = "admin-key-93fa21"
	// plantedContent is written to a file through the tools: it must not
	// reach the audit trail.
	plantedContent = "CONTENT-NEVER-AUDITED-5c2e"
)

// toolCall posts a tool call over the HTTP API for conv and returns its
// result.
func toolCall(t *testing.T, base, conv, tool string, args map[string]any) server.Result {
	t.Helper()
	return toolCallKey(t, base, observeAPIKey, conv, tool, args)
}

func toolCallKey(t *testing.T, base, key, conv, tool string, args map[string]any) server.Result {
	t.Helper()
	body, err := json.Marshal(args)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, base+"/tools/"+tool, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set(server.HeaderConversation, conv)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var res server.Result
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
	return res
}

// get sends GET path with key ("" for none) and returns the status and
// body.
func get(t *testing.T, base, path, key string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, data
}

// scrape reads /metrics with Prometheus's own text parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, data := get(t, base, "/metrics", observeAdminKey)
	require.Equal(t, http.StatusOK, code, "%s", data)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	require.NoError(t, err)
	return families
}

// value is the value of family name's metric with labels (all of them
// given), or -1 when there is none.
func value(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := families[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func auditEntries(t *testing.T, base, query string) []server.AuditEntry {
	t.Helper()
	code, data := get(t, base, "/admin/audit?"+query, observeAdminKey)
	require.Equal(t, http.StatusOK, code, "%s", data)
	var out struct {
		Entries []server.AuditEntry `json:"entries"`
	}
	require.NoError(t, json.Unmarshal(data, &out))
	return out.Entries
}

// An agent's turn over HTTP and one over MCP show in the metrics (as
// Prometheus's parser reads them) and in the audit trail, line by line,
// with what ran, its exit code and the bytes written, and never a file's
// content or a key. Both need the admin key.
func TestMetricsAndAudit(t *testing.T) {
	b := localBackend(t)
	auditFile := filepath.Join(t.TempDir(), "audit", "audit.jsonl")
	s := newServer(t, b, func(o *server.Options) {
		o.APIKey, o.AdminKey, o.AuditFile = observeAPIKey, observeAdminKey, auditFile
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)

	for _, key := range []string{"", observeAPIKey} {
		for _, path := range []string{"/metrics", "/admin/audit"} {
			code, _ := get(t, hs.URL, path, key)
			assert.Equal(t, http.StatusUnauthorized, code, "GET %s with key %q", path, key)
		}
	}

	// Conversation A, over HTTP.
	created := toolCall(t, hs.URL, "conv-a", "create_sandbox", nil)
	require.False(t, created.IsError, created.Output)
	id := created.SandboxID
	res := toolCall(t, hs.URL, "conv-a", "execute", map[string]any{"sandbox_id": id, "command": "echo hi; exit 3"})
	require.Contains(t, res.Output, "hi")
	res = toolCall(t, hs.URL, "conv-a", "write_file", map[string]any{"sandbox_id": id, "path": "notes.txt", "content": plantedContent})
	require.False(t, res.IsError, res.Output)
	res = toolCall(t, hs.URL, "conv-a", "read_file", map[string]any{"sandbox_id": id, "path": "notes.txt"})
	require.Contains(t, res.Output, plantedContent)
	res = toolCall(t, hs.URL, "conv-a", "execute", map[string]any{"sandbox_id": "nosuchsandbox", "command": "true"})
	require.True(t, res.IsError)
	res = toolCall(t, hs.URL, "conv-a", "delete_sandbox", map[string]any{"sandbox_id": id})
	require.False(t, res.IsError, res.Output)

	// Conversation B, over MCP.
	cs := mcpClient(t, hs.URL+"/mcp", http.Header{"Authorization": {"Bearer " + observeAPIKey}, server.HeaderConversation: {"conv-b"}})
	call := func(name string, args map[string]any) string {
		r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		require.False(t, r.IsError)
		return r.Content[0].(*mcp.TextContent).Text
	}
	call("create_sandbox", nil)
	var idB string
	for _, e := range auditEntries(t, hs.URL, "conversation=conv:conv-b&tool=create_sandbox") {
		idB = e.Sandbox
	}
	require.NotEmpty(t, idB, "the MCP create is not in the trail with its sandbox")
	call("execute", map[string]any{"sandbox_id": idB, "command": "exit 0"})

	m := scrape(t, hs.URL)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sandboxkit_sandbox_creates_total", map[string]string{"type": "main", "source": "cold", "outcome": "ok"}, 2},
		{"sandboxkit_sandbox_create_seconds", map[string]string{"type": "main", "source": "cold"}, 2},
		{"sandboxkit_tool_calls_total", map[string]string{"tool": "execute", "outcome": "ok"}, 2},
		{"sandboxkit_tool_calls_total", map[string]string{"tool": "execute", "outcome": "error"}, 1},
		{"sandboxkit_tool_calls_total", map[string]string{"tool": "write_file", "outcome": "ok"}, 1},
		{"sandboxkit_tool_call_seconds", map[string]string{"tool": "execute"}, 3},
		{"sandboxkit_exec_seconds", map[string]string{"api": "tool"}, 2},
		{"sandboxkit_http_requests_total", map[string]string{"route": "POST /tools/{name}", "code": "200"}, 6},
		{"sandboxkit_http_requests_total", map[string]string{"route": "GET /metrics", "code": "401"}, 2},
		{"sandboxkit_http_requests_total", map[string]string{"route": "GET /admin/audit", "code": "200"}, 1},
		{"sandboxkit_sandbox_removals_total", map[string]string{"reason": "deleted"}, 1},
		{"sandboxkit_sandboxes", map[string]string{"backend": "local", "type": "main", "state": "running"}, 1},
		{"sandboxkit_scrape_list_errors", map[string]string{}, 0},
		{"sandboxkit_terminals_open", map[string]string{}, 0},
	} {
		assert.Equal(t, c.want, value(m, c.name, c.labels), "%s%v", c.name, c.labels)
	}
	assert.Greater(t, value(m, "go_goroutines", map[string]string{}), 0.0, "Go runtime metrics")
	checkMetricsDocumented(t, m)

	// The trail of conversation A, in order.
	entries := auditEntries(t, hs.URL, "conversation=conv:conv-a")
	require.Len(t, entries, 6)
	tools := []string{}
	for _, e := range entries {
		tools = append(tools, e.Tool)
		assert.Equal(t, server.AuditTool, e.Kind)
		assert.False(t, e.Time.IsZero())
		assert.GreaterOrEqual(t, e.DurationMS, 0.0)
	}
	assert.Equal(t, []string{"create_sandbox", "execute", "write_file", "read_file", "execute", "delete_sandbox"}, tools)
	assert.Equal(t, id, entries[0].Sandbox)
	assert.Equal(t, []string{"sh", "-c", "echo hi; exit 3"}, entries[1].Argv)
	require.NotNil(t, entries[1].ExitCode)
	assert.Equal(t, 3, *entries[1].ExitCode)
	assert.Equal(t, "notes.txt", entries[2].Path)
	assert.Equal(t, int64(len(plantedContent)), entries[2].Bytes)
	assert.Equal(t, "notes.txt", entries[3].Path)
	assert.True(t, entries[4].IsError)
	assert.Nil(t, entries[4].ExitCode)
	assert.Equal(t, id, entries[5].Sandbox)

	// Filters.
	assert.Len(t, auditEntries(t, hs.URL, "sandbox="+idB), 2)
	last := auditEntries(t, hs.URL, "limit=1")
	require.Len(t, last, 1)
	assert.Equal(t, "execute", last[0].Tool)
	assert.Equal(t, idB, last[0].Sandbox)
	code, body := get(t, hs.URL, "/admin/audit?since=yesterday", observeAdminKey)
	assert.Equal(t, http.StatusBadRequest, code, "%s", body)
	code, body = get(t, hs.URL, "/admin/audit?limit=0", observeAdminKey)
	assert.Equal(t, http.StatusBadRequest, code, "%s", body)

	// The file holds the same, one JSON object a line, without the
	// content or either key.
	require.NoError(t, s.Close())
	data, err := os.ReadFile(auditFile)
	require.NoError(t, err)
	for _, secret := range []string{plantedContent, observeAPIKey, observeAdminKey} {
		assert.NotContains(t, string(data), secret)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	lines := 0
	for sc.Scan() {
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "line %q", sc.Text())
		assert.Contains(t, e, "time")
		assert.Contains(t, e, "kind")
		lines++
	}
	assert.Equal(t, 8, lines, "six calls of A, two of B")
	fi, err := os.Stat(auditFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the trail names what agents ran: the operator's alone")
}

// The OpenSandbox API's changes (a create, a command through execd) and a
// terminal over the WebSocket route are audited too; reads are not.
func TestAuditOpenSandboxAndTerminal(t *testing.T) {
	s := newServer(t, localBackend(t), func(o *server.Options) {
		o.APIKey, o.AdminKey = osbKey, observeAdminKey
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	c := osbWire{t: t, base: hs.URL}
	id := c.create(nil)
	assert.Equal(t, "osb-audit\n", c.sh(id, "echo osb-audit; exit 0"))
	c.do("GET", "/v1/sandboxes/"+id, nil, nil)

	// A terminal of a sandbox of conversation term (made with the tools).
	created := toolCallKey(t, hs.URL, osbKey, "term", "create_sandbox", nil)
	require.False(t, created.IsError, created.Output)
	term := mustDial(t, hs.URL, created.SandboxID, url.Values{"command": {"cat"}},
		http.Header{"Authorization": {"Bearer " + osbKey}, server.HeaderConversation: {"term"}})
	term.expect("typed\n", "typed")
	term.leave()
	waitFor(t, func() bool { return len(auditEntries(t, hs.URL, "kind=terminal")) == 1 })
	termEntry := auditEntries(t, hs.URL, "kind=terminal")[0]
	assert.Equal(t, "GET /sandboxes/{id}/terminal", termEntry.Route)
	assert.Equal(t, created.SandboxID, termEntry.Sandbox)
	assert.Equal(t, "conv:term", termEntry.Conversation)
	assert.Equal(t, []string{"sh", "-c", "cat"}, termEntry.Argv)
	assert.Equal(t, http.StatusSwitchingProtocols, termEntry.Status)

	entries := auditEntries(t, hs.URL, "sandbox="+id)
	var routes []string
	for _, e := range entries {
		routes = append(routes, e.Kind+" "+e.Route)
	}
	require.Len(t, entries, 2, "%q", routes)
	assert.Equal(t, server.AuditOpenSandbox, entries[0].Kind)
	assert.Equal(t, "POST /v1/sandboxes", entries[0].Route)
	assert.Equal(t, []string{"tail", "-f", "/dev/null"}, entries[0].Argv)
	assert.Equal(t, http.StatusAccepted, entries[0].Status)
	assert.Equal(t, "opensandbox", entries[0].Conversation)
	assert.Equal(t, "execd POST /command", entries[1].Route)
	assert.Equal(t, []string{"sh", "-c", "echo osb-audit; exit 0"}, entries[1].Argv)
	require.NotNil(t, entries[1].ExitCode)
	assert.Equal(t, 0, *entries[1].ExitCode)

	m := scrape(t, hs.URL)
	assert.Equal(t, 1.0, value(m, "sandboxkit_exec_seconds", map[string]string{"api": "opensandbox"}))
	assert.Equal(t, 1.0, value(m, "sandboxkit_terminal_sessions_total", map[string]string{"api": "websocket"}))
}

// [sandbox.serve]'s audit keys: a relative audit_file lies beside the
// config file.
func TestAuditConfigKeys(t *testing.T) {
	cfg, err := sandboxkit.ParseConfig([]byte(`
[sandbox]
backend = "local"
[sandbox.serve]
audit_file = "logs/audit.jsonl"
audit_max_size = "1m"
audit_keep = 3
`), "/etc/sbx/sandbox.toml")
	require.NoError(t, err)
	opts, _, err := server.ConfigOptions(cfg)
	require.NoError(t, err)
	assert.Equal(t, "/etc/sbx/logs/audit.jsonl", opts.AuditFile)
	assert.Equal(t, int64(1<<20), opts.AuditMaxBytes)
	assert.Equal(t, 3, opts.AuditKeep)
}

// checkMetricsDocumented: docs/serve.md lists every sandboxkit_ metric
// scraped, and its audit example decodes into AuditEntry field by field.
func checkMetricsDocumented(t *testing.T, families map[string]*dto.MetricFamily) {
	t.Helper()
	page, err := os.ReadFile("../docs/serve.md")
	require.NoError(t, err)
	for name := range families {
		if strings.HasPrefix(name, "sandboxkit_") {
			assert.Contains(t, string(page), "`"+name+"`", "docs/serve.md's metrics table")
		}
	}
	_, example, ok := strings.Cut(string(page), "```json\n{\"time\"")
	require.True(t, ok, "docs/serve.md: no audit example")
	example, _, _ = strings.Cut(`{"time"`+example, "```")
	dec := json.NewDecoder(strings.NewReader(example))
	dec.DisallowUnknownFields()
	n := 0
	for dec.More() {
		var e server.AuditEntry
		require.NoError(t, dec.Decode(&e), "docs/serve.md's audit example")
		n++
	}
	assert.Equal(t, 3, n)
}
