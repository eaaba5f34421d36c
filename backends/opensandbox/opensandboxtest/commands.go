package opensandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// execd's POST /command as the real execd runs it, where sbx serve's
// behaves better: the command does not end with its client's connection
// nor at its timeout (execd's timeout kills the bash it started, not
// what bash started, and the client must kill the rest: here nothing is
// killed, which asks the same of the client), the stream stays open about
// a second after its last event, and, with KeepCommandLogs, the output is
// kept in /tmp/<id>.stdout and .stderr.

// holdOpen is how long execd keeps a command's stream open after its last
// event.
const holdOpen = time.Second

func (s *Server) command(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	// The API runs the command without the timeout, which is the layer's.
	var req map[string]json.RawMessage
	var timeout time.Duration
	if json.Unmarshal(body, &req) == nil {
		var ms int64
		if json.Unmarshal(req["timeout"], &ms) == nil && ms > 0 {
			timeout = time.Duration(ms) * time.Millisecond
			delete(req, "timeout")
			body, _ = json.Marshal(req)
		}
	}
	inner := r.Clone(context.WithoutCancel(r.Context()))
	inner.Body, inner.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	cw := &commandWriter{w: w, header: http.Header{}, keepLogs: s.opts.KeepCommandLogs}
	done := make(chan struct{})
	s.commands.Go(func() {
		defer close(done)
		s.inner.ServeHTTP(cw, inner)
		cw.closeLogs()
	})
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-done:
	case <-expired:
		cw.timedOut()
	case <-r.Context().Done():
		cw.cut()
		return
	case <-s.closing:
		cw.cut()
		return
	}
	select {
	case <-time.After(holdOpen):
	case <-r.Context().Done():
	case <-s.closing:
	}
	cw.cut()
}

// commandWriter carries a command's events to its client until cut, and
// then lets the command go on writing to nobody.
type commandWriter struct {
	mu          sync.Mutex
	w           http.ResponseWriter
	header      http.Header // the API's, copied to w at the first write
	wroteHeader bool
	isCut       bool

	keepLogs bool
	pending  []byte // the part of an event not yet parsed
	out, err *os.File
}

func (c *commandWriter) Header() http.Header { return c.header }

func (c *commandWriter) WriteHeader(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeHeader(code)
}

func (c *commandWriter) writeHeader(code int) {
	if c.wroteHeader || c.isCut {
		return
	}
	c.wroteHeader = true
	for k, v := range c.header {
		c.w.Header()[k] = v
	}
	c.w.WriteHeader(code)
}

func (c *commandWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keepLogs {
		c.log(p)
	}
	c.writeHeader(http.StatusOK)
	if !c.isCut {
		if _, err := c.w.Write(p); err != nil {
			c.isCut = true // the client went; the command goes on
		}
	}
	return len(p), nil
}

func (c *commandWriter) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.w.(http.Flusher); ok && !c.isCut {
		f.Flush()
	}
}

// cut ends what reaches the client (the handler is about to return).
func (c *commandWriter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.isCut = true
}

// timedOut sends what execd sends when its timeout kills the command's
// bash, and cuts.
func (c *commandWriter) timedOut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeHeader(http.StatusOK)
	if !c.isCut {
		ev, _ := json.Marshal(map[string]any{"type": "error", "timestamp": time.Now().UnixMilli(),
			"error": map[string]any{"ename": "CommandExecError", "evalue": "-1", "traceback": []string{"signal: killed"}}})
		c.w.Write(append(ev, '\n', '\n'))
		if f, ok := c.w.(http.Flusher); ok {
			f.Flush()
		}
	}
	c.isCut = true
}

// log keeps the output of the events in p in /tmp/<id>.stdout and
// .stderr, as execd does (each line with its "\n").
func (c *commandWriter) log(p []byte) {
	c.pending = append(c.pending, p...)
	for {
		i := bytes.Index(c.pending, []byte("\n\n"))
		if i < 0 {
			return
		}
		var ev struct{ Type, Text string }
		json.Unmarshal(c.pending[:i], &ev)
		c.pending = c.pending[i+2:]
		switch ev.Type {
		case "init":
			c.out, _ = os.Create(filepath.Join("/tmp", ev.Text+".stdout"))
			c.err, _ = os.Create(filepath.Join("/tmp", ev.Text+".stderr"))
		case "stdout", "stderr":
			f := c.out
			if ev.Type == "stderr" {
				f = c.err
			}
			if f != nil {
				if ev.Text != "\n" {
					ev.Text += "\n"
				}
				f.WriteString(ev.Text)
			}
		}
	}
}

func (c *commandWriter) closeLogs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range []*os.File{c.out, c.err} {
		if f != nil {
			f.Close()
		}
	}
}
