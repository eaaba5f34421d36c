package sbxdwire

import (
	"encoding/json"
	"fmt"
	"time"
)

// TerminalRequest starts a terminal (POST RouteTerminal) or attaches to one
// (POST RouteTerminal/{id}/attach: only Rows and Cols are read); it is
// sent in the HdrTerminal header.
type TerminalRequest struct {
	ID   string            `json:"id"`
	Argv []string          `json:"argv,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	Dir  string            `json:"dir,omitempty"`
	User string            `json:"user,omitempty"`
	Rows int               `json:"rows,omitempty"`
	Cols int               `json:"cols,omitempty"`
}

// DecodeTerminalRequest parses and checks the HdrTerminal header; argv is
// required when starting.
func DecodeTerminalRequest(s string, start bool) (TerminalRequest, error) {
	var r TerminalRequest
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, fmt.Errorf("terminal request: %w", err)
	}
	if r.Rows < 0 || r.Cols < 0 || r.Rows > 0xffff || r.Cols > 0xffff {
		return r, fmt.Errorf("terminal request: size %dx%d out of range", r.Cols, r.Rows)
	}
	if !start {
		return r, nil
	}
	// The same checks as a command's.
	_, err := DecodeExecRequest(mustJSON(ExecRequest{ID: r.ID, Argv: r.Argv, Env: r.Env}))
	return r, err
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TerminalStatus describes a terminal (GET RouteTerminal).
type TerminalStatus struct {
	ID       string    `json:"id"`
	Argv     []string  `json:"argv"`
	PID      int       `json:"pid"`
	Running  bool      `json:"running"`
	ExitCode int       `json:"exit_code"`
	Attached int       `json:"attached"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	Rows     int       `json:"rows"`
	Cols     int       `json:"cols"`
}

// ResizeRequest resizes a terminal (POST RouteTerminal/{id}/resize).
type ResizeRequest struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}
