package server_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/server"
)

// TestRequestSizeLimits: the request size limits are what docs/serve.md says,
// and larger requests get 413.
func TestRequestSizeLimits(t *testing.T) {
	page, err := os.ReadFile("../docs/serve.md")
	require.NoError(t, err)
	text := strings.Join(strings.Fields(string(page)), " ")
	for _, want := range []string{
		fmt.Sprintf("JSON API request (`POST /tools/NAME`, `write_file`'s content included) is at most %d MiB", server.MaxJSONBodyBytes>>20),
		fmt.Sprintf("an MCP request over HTTP at most %d MiB", server.MaxMCPBodyBytes>>20),
		fmt.Sprintf("an `sbx mcp` message at most %d MiB", server.MaxStdioMessage>>20),
		"413 Request Entity Too Large",
	} {
		assert.Contains(t, text, want, "docs/serve.md")
	}
	assert.NotContains(t, text, "interleaved as written", "docs/serve.md")

	s := newServer(t, localBackend(t), nil)
	url := serveHTTP(t, s)
	for _, c := range []struct {
		path  string
		limit int64
	}{
		{"/tools/write_file", server.MaxJSONBodyBytes},
		{"/mcp", server.MaxMCPBodyBytes},
	} {
		for _, size := range []int64{c.limit, c.limit + 1} {
			// A JSON string of the size, so only the size can be wrong.
			body := io.MultiReader(strings.NewReader(`{"content":"`), io.LimitReader(zeros{}, size-len64(`{"content":""}`)), strings.NewReader(`"}`))
			req, err := http.NewRequest(http.MethodPost, url+c.path, body)
			require.NoError(t, err)
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set(server.HeaderConversation, "c")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if size > c.limit {
				assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s with %d bytes: %s", c.path, size, data)
			} else {
				assert.NotEqual(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s with %d bytes: %s", c.path, size, data)
			}
		}
	}
}

func len64(s string) int64 { return int64(len(s)) }

// zeros reads as endless '0' characters.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}
