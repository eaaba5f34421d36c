package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// postMCP posts body to url as a streamable HTTP MCP client does, with
// extra headers.
func postMCP(t *testing.T, url, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(data)
}

// TestMCPHTTPNeedsSession: over streamable HTTP, a request other than
// initialize without Mcp-Session-Id gets 400 Bad Request, as the MCP spec
// says, with a JSON-RPC error naming the request.
func TestMCPHTTPNeedsSession(t *testing.T) {
	s := newServer(t, localBackend(t), nil)
	url := serveHTTP(t, s) + "/mcp"
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_sandboxes","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":7,"method":"ping"}`,
	} {
		resp, data := postMCP(t, url, body, nil)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", body, data)
		var answer struct {
			ID    any `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if assert.NoError(t, json.Unmarshal([]byte(data), &answer), data) {
			assert.EqualValues(t, 7, answer.ID, data)
			assert.Equal(t, -32600, answer.Error.Code, data)
			assert.Contains(t, answer.Error.Message, "Mcp-Session-Id", data)
		}
	}
	resp, data := postMCP(t, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, data)

	// initialize needs none, and answers with one.
	resp, data = postMCP(t, url, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, data)
	session := resp.Header.Get("Mcp-Session-Id")
	require.NotEmpty(t, session)
	postMCP(t, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, map[string]string{"Mcp-Session-Id": session})
	resp, data = postMCP(t, url, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_sandboxes","arguments":{}}}`,
		map[string]string{"Mcp-Session-Id": session})
	assert.Equal(t, http.StatusOK, resp.StatusCode, data)
	assert.Contains(t, data, "no sandboxes")

	// A client of the sessionless protocol (2026-07-28) is told the
	// versions this server speaks, so it can fall back.
	resp, data = postMCP(t, url, `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		map[string]string{"MCP-Protocol-Version": "2026-07-28"})
	assert.NotContains(t, data, "Mcp-Session-Id", "status %d", resp.StatusCode)
	assert.Contains(t, data, "2025-06-18", "status %d", resp.StatusCode)
}
