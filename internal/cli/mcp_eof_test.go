package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestMCPStdioAnswersBeforeEOF: printf '<initialize>\n<tools/call>\n' |
// sbx mcp prints both answers, then exits 0: requests read before standard
// input ends are answered (create_sandbox takes long enough that the
// answers were always lost; initialize alone, only mostly).
func TestMCPStdioAnswersBeforeEOF(t *testing.T) {
	setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := sbxIn(t, ctx, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"printf","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_sandbox","arguments":{}}}
`, "mcp")
	r.expect(t, 0)
	answers := map[int]string{}
	for line := range strings.Lines(r.stdout) {
		var a struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("sbx mcp's output line %q: %v", line, err)
		}
		answers[a.ID] = string(a.Result)
	}
	if !strings.Contains(answers[1], `"protocolVersion":"2025-06-18"`) || !strings.Contains(answers[2], "Created sandbox") {
		t.Fatalf("sbx mcp's output %q: want the answers to initialize (1) and create_sandbox (2)\nstderr: %s", r.stdout, r.stderr)
	}
	if sbs := listSandboxes(t); len(sbs) != 0 {
		t.Fatalf("sbx mcp left sandboxes behind: %v", sbs)
	}
}
