package execdws

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestServe drives Serve with a client: each frame type reaches its
// handler or is answered, a failed stdin ends the loop with its error
// frame, and Exit sends the exit code and closes.
func TestServe(t *testing.T) {
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		c := New(ws)
		defer c.Close()
		c.Serve(Handlers{
			Stdin: func(p []byte) error {
				if string(p) == "fail" {
					return errors.New("stdin closed")
				}
				got <- "stdin:" + string(p)
				return nil
			},
			Resize: func(rows, cols int) error { got <- "resize"; return nil },
			Signal: func(name string) { got <- "signal:" + name },
		})
		got <- "loop ended"
	}))
	defer srv.Close()
	cl, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	read := func() map[string]any {
		t.Helper()
		cl.SetReadDeadline(time.Now().Add(10 * time.Second))
		var f map[string]any
		if err := cl.ReadJSON(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	cl.WriteJSON(map[string]any{"type": "stdin", "data": "ls\r"})
	cl.WriteJSON(map[string]any{"type": "resize", "rows": 30, "cols": 90})
	cl.WriteJSON(map[string]any{"type": "signal", "signal": "SIGINT"})
	for _, want := range []string{"stdin:ls\r", "resize", "signal:SIGINT"} {
		if g := <-got; g != want {
			t.Errorf("handler got %q, want %q", g, want)
		}
	}
	cl.WriteJSON(map[string]any{"type": "ping"})
	if f := read(); f["type"] != "pong" {
		t.Errorf("ping answered %v", f)
	}
	cl.WriteJSON(map[string]any{"type": "nope"})
	if f := read(); f["type"] != "error" || f["code"] != "INVALID_FRAME" {
		t.Errorf("an unknown frame answered %v", f)
	}
	cl.WriteJSON(map[string]any{"type": "stdin", "data": "fail"})
	if f := read(); f["type"] != "error" || f["code"] != "STDIN_WRITE_FAILED" {
		t.Errorf("a failed stdin answered %v", f)
	}
	if g := <-got; g != "loop ended" {
		t.Errorf("after a failed stdin: %q", g)
	}
}

// TestExit: the exit frame carries the code, then the connection closes
// normally.
func TestExit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		New(ws).Exit(3)
	}))
	defer srv.Close()
	cl, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var f map[string]any
	if err := cl.ReadJSON(&f); err != nil || f["type"] != "exit" || f["exit_code"] != 3.0 {
		t.Fatalf("first frame %v, %v", f, err)
	}
	_, _, err = cl.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Errorf("after exit: %v, want a normal close", err)
	}
}
