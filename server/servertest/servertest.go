// Package servertest drives the sandbox server's tools the way an agent
// does, over any transport, so the MCP (HTTP and stdio) and JSON API tests of
// package server and of sbx serve / sbx mcp share one script.
package servertest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Caller calls one tool and returns the text the agent reads and whether
// the call reported an error. err is for transport failures.
type Caller func(ctx context.Context, tool string, args map[string]any) (text string, isError bool, err error)

// MCP returns a Caller over an MCP client session.
func MCP(cs *mcp.ClientSession) Caller {
	return func(ctx context.Context, tool string, args map[string]any) (string, bool, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return "", false, err
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String(), res.IsError, nil
	}
}

// HTTP returns a Caller over the JSON API at base (http://host:port), as
// conversation conv, with apiKey ("" for none).
func HTTP(base, apiKey, conv string) Caller {
	return func(ctx context.Context, tool string, args map[string]any) (string, bool, error) {
		body, err := json.Marshal(args)
		if err != nil {
			return "", false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tools/"+tool, bytes.NewReader(body))
		if err != nil {
			return "", false, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Conversation-Id", conv)
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", false, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", false, err
		}
		if resp.StatusCode != http.StatusOK {
			return "", false, fmt.Errorf("POST /tools/%s: %s: %s", tool, resp.Status, data)
		}
		var res struct {
			Output  string `json:"output"`
			IsError bool   `json:"is_error"`
		}
		if err := json.Unmarshal(data, &res); err != nil {
			return "", false, fmt.Errorf("POST /tools/%s: %v in %s", tool, err, data)
		}
		return res.Output, res.IsError, nil
	}
}

// Must calls a tool that must succeed and returns its text.
func Must(t testing.TB, call Caller, tool string, args map[string]any) string {
	t.Helper()
	text, isErr, err := call(context.Background(), tool, args)
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	if isErr {
		t.Fatalf("%s %v: tool error: %s", tool, args, text)
	}
	return text
}

// Fails calls a tool that must report an error and returns its text.
func Fails(t testing.TB, call Caller, tool string, args map[string]any) string {
	t.Helper()
	text, isErr, err := call(context.Background(), tool, args)
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	if !isErr {
		t.Fatalf("%s %v: want a tool error, got: %s", tool, args, text)
	}
	return text
}

var (
	sandboxIDRE = regexp.MustCompile(`Created sandbox (\S+) \(type`)
	jobIDRE     = regexp.MustCompile(`Started background job (\S+)\.`)
	cursorRE    = regexp.MustCompile(`cursor=(\d+)`)
)

// Create calls create_sandbox and returns the new sandbox's ID.
func Create(t testing.TB, call Caller, args map[string]any) string {
	t.Helper()
	text := Must(t, call, "create_sandbox", args)
	m := sandboxIDRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("create_sandbox answer has no sandbox ID: %s", text)
	}
	return m[1]
}

func check(t testing.TB, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("%s: want %q in:\n%s", what, w, got)
		}
	}
}

// AgentTurn plays one agent turn in dir (a directory the sandbox can
// write, "" for its working directory): create, write, execute, edit, grep,
// read, a background job, reconnect, delete. It returns the sandbox ID (gone
// by then).
func AgentTurn(t testing.TB, call Caller, dir string) string {
	t.Helper()
	id := Create(t, call, map[string]any{"type": "main", "timeout_minutes": 30})
	p := func(name string) string {
		if dir == "" {
			return cmp.Or(name, ".")
		}
		return dir + "/" + name
	}
	sb := func(args map[string]any) map[string]any {
		args["sandbox_id"] = id
		return args
	}

	check(t, "write_file", Must(t, call, "write_file", sb(map[string]any{"path": p("hello.py"), "content": "print('hello')\nx = 1\n"})),
		"Created file")
	check(t, "execute", Must(t, call, "execute", sb(map[string]any{"command": "cat " + p("hello.py") + "; echo to-stderr >&2; exit 3"})),
		"print('hello')", "to-stderr", "Exit code: 3")
	check(t, "edit_file", Must(t, call, "edit_file", sb(map[string]any{"path": p("hello.py"), "old_string": "x = 1", "new_string": "x = 42"})),
		"Replaced 1 occurrence")
	check(t, "grep", Must(t, call, "grep", sb(map[string]any{"pattern": "x = 4[0-9]", "path": p(""), "mode": "content"})),
		"hello.py:2:x = 42")
	check(t, "read_file", Must(t, call, "read_file", sb(map[string]any{"path": p("hello.py")})),
		"     1\tprint('hello')\n     2\tx = 42")
	check(t, "glob", Must(t, call, "glob", sb(map[string]any{"pattern": "*.py", "path": p("")})), "hello.py")
	check(t, "ls", Must(t, call, "ls", sb(map[string]any{"path": p("")})), "hello.py")
	check(t, "edit_file not unique", Fails(t, call, "edit_file", sb(map[string]any{"path": p("hello.py"), "old_string": "l", "new_string": "L"})),
		"Error: old_string occurs")

	// A background job: start, follow to the end, read everything.
	text := Must(t, call, "execute", sb(map[string]any{"command": "for i in 1 2 3; do echo line$i; done; exit 7", "background": true}))
	m := jobIDRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("execute background: no job ID in: %s", text)
	}
	job := m[1]
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := Must(t, call, "job_status", sb(map[string]any{"job_id": job}))
		if strings.Contains(st, "has finished") {
			check(t, "job_status", st, "Exit code: 7")
			break
		}
		check(t, "job_status", st, "is running")
		if time.Now().After(deadline) {
			t.Fatalf("job %s still running after 60s: %s", job, st)
		}
		time.Sleep(50 * time.Millisecond) // polling a job the sandbox runs
	}
	out := Must(t, call, "job_output", sb(map[string]any{"job_id": job, "cursor": 0}))
	check(t, "job_output", out, "line1\nline2\nline3\n", "exit code 7", "this is all its output")
	cm := cursorRE.FindStringSubmatch(out)
	if cm == nil || cm[1] != "18" {
		t.Fatalf("job_output: want cursor=18 in: %s", out)
	}
	again := Must(t, call, "job_output", sb(map[string]any{"job_id": job, "cursor": 18}))
	if strings.Contains(again, "line") {
		t.Fatalf("job_output from the end cursor repeated output: %s", again)
	}
	check(t, "job_kill unknown", Fails(t, call, "job_kill", sb(map[string]any{"job_id": "nope"})), "not found")

	// A long job, killed.
	text = Must(t, call, "execute", sb(map[string]any{"command": "echo started; sleep 300", "background": true}))
	long := jobIDRE.FindStringSubmatch(text)[1]
	check(t, "job_kill", Must(t, call, "job_kill", sb(map[string]any{"job_id": long})), "has finished")

	check(t, "connect_sandbox", Must(t, call, "connect_sandbox", map[string]any{"sandbox_id": id}), "Connected to sandbox "+id)
	check(t, "list_sandboxes", Must(t, call, "list_sandboxes", map[string]any{}), id)
	check(t, "delete_sandbox", Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id}), "Deleted sandbox "+id)
	check(t, "connect after delete", Fails(t, call, "connect_sandbox", map[string]any{"sandbox_id": id}),
		"was not found", "create_sandbox")
	check(t, "list after delete", Must(t, call, "list_sandboxes", map[string]any{}), "no sandboxes")
	return id
}
