// Package execdws is the server end of the WebSocket that steers a bash
// session of OpenSandbox's execd (GET /ws/session/{id}): JSON frames,
// written one at a time, and the loop that reads the client's frames. sbx
// serve's OpenSandbox API and the in-process OpenSandbox server of the
// tests both serve it.
//
// Client frames: {"type":"stdin","data"}, {"type":"resize","cols","rows"},
// {"type":"signal","signal":"SIGINT"}, {"type":"ping"}. Server frames:
// {"type":"replay","data","offset"} (with ?since=), {"type":"connected",
// "session_id","mode"}, {"type":"stdout","data","timestamp"},
// {"type":"exit","exit_code"}, {"type":"error","error","code"},
// {"type":"pong"}.
package execdws

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Conn is a session's WebSocket on the server side. Its methods are safe
// for concurrent use.
type Conn struct {
	ws *websocket.Conn
	mu sync.Mutex
}

// New wraps an upgraded WebSocket.
func New(ws *websocket.Conn) *Conn { return &Conn{ws: ws} }

// Send writes one frame.
func (c *Conn) Send(frame map[string]any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteJSON(frame)
}

// Error sends an error frame with its machine-readable code.
func (c *Conn) Error(msg, code string) error {
	return c.Send(map[string]any{"type": "error", "error": msg, "code": code})
}

// Output sends output as a stdout frame.
func (c *Conn) Output(p []byte) error {
	return c.Send(map[string]any{"type": "stdout", "data": string(p), "timestamp": time.Now().UnixMilli()})
}

// Exit sends the exit frame, then a normal close, and closes the
// connection (which ends Serve's loop).
func (c *Conn) Exit(code int) {
	c.Send(map[string]any{"type": "exit", "exit_code": code})
	c.mu.Lock()
	c.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "process exited"))
	c.mu.Unlock()
	c.ws.Close()
}

// Close closes the connection.
func (c *Conn) Close() error { return c.ws.Close() }

// Handlers are what the client's frames do.
type Handlers struct {
	// Stdin types input; an error ends the loop (after an error frame).
	Stdin func(data []byte) error
	// Resize changes the terminal's size.
	Resize func(rows, cols int) error
	// Signal delivers a signal named like "SIGINT".
	Signal func(name string)
}

// Serve reads the client's frames until the connection ends.
func (c *Conn) Serve(h Handlers) {
	for {
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var f struct {
			Type   string `json:"type"`
			Data   string `json:"data"`
			Cols   int    `json:"cols"`
			Rows   int    `json:"rows"`
			Signal string `json:"signal"`
		}
		if json.Unmarshal(msg, &f) != nil {
			c.Error("unreadable frame", "INVALID_FRAME")
			continue
		}
		switch f.Type {
		case "stdin":
			if err := h.Stdin([]byte(f.Data)); err != nil {
				c.Error(err.Error(), "STDIN_WRITE_FAILED")
				return
			}
		case "resize":
			if err := h.Resize(f.Rows, f.Cols); err != nil {
				c.Error("resize failed: "+err.Error(), "RUNTIME_ERROR")
			}
		case "signal":
			h.Signal(f.Signal)
		case "ping":
			c.Send(map[string]any{"type": "pong"})
		default:
			c.Error("unknown frame type", "INVALID_FRAME")
		}
	}
}
