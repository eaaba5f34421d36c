package opensandbox

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// A terminal whose size or first line cannot be sent fails: Terminal once
// checked a shadowed err and went on with a dead connection.
func TestTerminalBeginFails(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			got <- string(msg)
		}
	}))
	defer srv.Close()
	dial := func() *websocket.Conn {
		c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		require.NoError(t, err)
		return c
	}

	c := dial()
	tm := &sessionTerm{conn: c}
	require.NoError(t, tm.begin(backend.TermSize{Rows: 24, Cols: 80}, "echo hi\n"))
	require.JSONEq(t, `{"type":"resize","rows":24,"cols":80}`, <-got)
	require.JSONEq(t, `{"type":"stdin","data":"echo hi\n"}`, <-got)
	c.Close()

	dead := dial()
	dead.Close()
	err := (&sessionTerm{conn: dead}).begin(backend.TermSize{Rows: 24, Cols: 80}, "echo hi\n")
	require.Error(t, err, "a terminal whose connection is gone began anyway")
	require.Contains(t, err.Error(), "terminal")
}
