package wait

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/backend"
)

// ForListeningPort is ready when a TCP connection to the sandbox's port,
// dialed from the host through its published address, is accepted.
func ForListeningPort(port int) *Poll {
	return ForFunc("tcp port "+strconv.Itoa(port), func(ctx context.Context, sb backend.Sandbox) error {
		addr, err := endpoint(ctx, sb, port)
		if err != nil {
			return err
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		// Docker's port proxy accepts on the host even when nothing listens
		// inside, then closes at once. A real server either sends
		// something or waits for the client.
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%s accepted and closed the connection at once (nothing listens behind it yet): %v", addr, err)
		}
		return nil
	})
}

// HTTP is an HTTP probe; see ForHTTP.
type HTTP struct {
	Poll
	port     int
	path     string
	method   string
	body     string
	header   http.Header
	statuses []int
	match    *regexp.Regexp
}

// ForHTTP is ready when a request to path on the sandbox's port answers
// with status 200 (see WithStatus) and, if set, a body matching
// WithBodyMatch.
func ForHTTP(port int, path string) *HTTP {
	h := &HTTP{port: port, path: path, method: http.MethodGet, statuses: []int{http.StatusOK}, header: http.Header{}}
	h.Poll = Poll{Name: fmt.Sprintf("http %s :%d%s", h.method, port, path), Check: h.check}
	return h
}

// WithMethod sets the method and request body (a POST of JSON, say).
func (h *HTTP) WithMethod(method, body string) *HTTP {
	h.method, h.body = method, body
	h.Name = fmt.Sprintf("http %s :%d%s", method, h.port, h.path)
	return h
}

// WithHeader adds a request header.
func (h *HTTP) WithHeader(k, v string) *HTTP { h.header.Add(k, v); return h }

// WithStatus sets the statuses that count as ready.
func (h *HTTP) WithStatus(codes ...int) *HTTP { h.statuses = codes; return h }

// WithBodyMatch requires the body to match the regular expression re.
func (h *HTTP) WithBodyMatch(re string) *HTTP { h.match = regexp.MustCompile(re); return h }

// WithTimeout sets the deadline.
func (h *HTTP) WithTimeout(d time.Duration) *HTTP { h.Timeout = d; return h }

// WithPollInterval sets the time between attempts.
func (h *HTTP) WithPollInterval(d time.Duration) *HTTP { h.PollInterval = d; return h }

func (h *HTTP) check(ctx context.Context, sb backend.Sandbox) error {
	addr, err := endpoint(ctx, sb, h.port)
	if err != nil {
		return err
	}
	var body io.Reader
	if h.body != "" {
		body = strings.NewReader(h.body)
	}
	req, err := http.NewRequestWithContext(ctx, h.method, "http://"+addr+h.path, body)
	if err != nil {
		return Permanent(err)
	}
	for k, vs := range h.header {
		req.Header[k] = vs
	}
	if h.body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if !slices.Contains(h.statuses, resp.StatusCode) {
		return fmt.Errorf("status %d (want %v): %s", resp.StatusCode, h.statuses, snippet(data))
	}
	if h.match != nil && !h.match.Match(data) {
		return fmt.Errorf("body does not match %q: %s", h.match, snippet(data))
	}
	return nil
}

// snippet shortens a body for an error message.
func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// ForLog is ready when the sandbox's main process has written a line
// matching the regular expression re (at least occurrences times, see
// WithOccurrences). It needs backend.LogReader.
func ForLog(re string) *LogProbe {
	l := &LogProbe{re: regexp.MustCompile(re), times: 1}
	l.Poll = Poll{Name: fmt.Sprintf("log line %q", re), Check: l.check}
	return l
}

// LogProbe is a log probe; see ForLog.
type LogProbe struct {
	Poll
	re    *regexp.Regexp
	times int
}

// WithOccurrences sets how many matching lines are needed.
func (l *LogProbe) WithOccurrences(n int) *LogProbe { l.times = n; return l }

// WithTimeout sets the deadline.
func (l *LogProbe) WithTimeout(d time.Duration) *LogProbe { l.Timeout = d; return l }

// WithPollInterval sets the time between attempts.
func (l *LogProbe) WithPollInterval(d time.Duration) *LogProbe { l.PollInterval = d; return l }

func (l *LogProbe) check(ctx context.Context, sb backend.Sandbox) error {
	lr, ok := backend.As[backend.LogReader](sb)
	if !ok {
		return Permanent(fmt.Errorf("the sandbox's backend cannot read its log: %w", errors.ErrUnsupported))
	}
	out, err := lr.Logs(ctx, 0)
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) {
			return Permanent(err)
		}
		return err
	}
	n := 0
	for line := range strings.Lines(string(out)) {
		if l.re.MatchString(line) {
			n++
		}
	}
	if n < l.times {
		return fmt.Errorf("%d of %d matching lines so far", n, l.times)
	}
	return nil
}

// ForExec is ready when argv, run in the sandbox, exits with code 0 (see
// WithExitCode).
func ForExec(argv ...string) *ExecProbe {
	e := &ExecProbe{argv: argv}
	e.Poll = Poll{Name: fmt.Sprintf("exec %q", argv), Check: e.check}
	return e
}

// ExecProbe is an exec probe; see ForExec.
type ExecProbe struct {
	Poll
	argv  []string
	codes []int
}

// WithExitCode sets the exit codes that count as ready (default 0).
func (e *ExecProbe) WithExitCode(codes ...int) *ExecProbe { e.codes = codes; return e }

// WithTimeout sets the deadline.
func (e *ExecProbe) WithTimeout(d time.Duration) *ExecProbe { e.Timeout = d; return e }

// WithPollInterval sets the time between attempts.
func (e *ExecProbe) WithPollInterval(d time.Duration) *ExecProbe { e.PollInterval = d; return e }

func (e *ExecProbe) check(ctx context.Context, sb backend.Sandbox) error {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Second)
	}
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: e.argv, Timeout: timeout, OutputLimit: 4096})
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) {
			return Permanent(err)
		}
		return err
	}
	codes := e.codes
	if len(codes) == 0 {
		codes = []int{0}
	}
	if !slices.Contains(codes, res.ExitCode) {
		return fmt.Errorf("exit code %d (want %v): %s", res.ExitCode, codes, snippet(append(res.Stdout, res.Stderr...)))
	}
	return nil
}

// ForMCP is ready when an MCP client completes the initialize handshake
// with the streamable HTTP server at path on the sandbox's port.
func ForMCP(port int, path string) *Poll {
	return ForFunc(fmt.Sprintf("mcp initialize :%d%s", port, path), func(ctx context.Context, sb backend.Sandbox) error {
		addr, err := endpoint(ctx, sb, port)
		if err != nil {
			return err
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "sandboxkit-probe", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + path, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
		if err != nil {
			return err
		}
		return cs.Close()
	})
}

// ForSSE is ready when a GET of path on the sandbox's port answers status
// 200 with Content-Type text/event-stream: an MCP server of the older SSE
// transport (OpenSage's gdb_mcp image) is up, as OpenSage's own check
// sees it. The stream is not read; it closes with the request. A sandbox
// whose main process has exited fails the probe at once: nothing will
// start listening any more.
func ForSSE(port int, path string) *Poll {
	return ForFunc(fmt.Sprintf("sse :%d%s", port, path), func(ctx context.Context, sb backend.Sandbox) error {
		addr, err := endpoint(ctx, sb, port)
		if err != nil {
			return err
		}
		u := "http://" + addr + path
		if err := CheckSSE(ctx, u); err != nil {
			if info, ierr := sb.Info(ctx); ierr == nil && info.State == backend.StateExited {
				return Permanent(fmt.Errorf("%v, and the sandbox's main process has exited: nothing will serve it", err))
			}
			return err
		}
		return nil
	})
}

// CheckSSE is one attempt of an SSE endpoint's readiness: GET u must
// answer status 200 with Content-Type text/event-stream. The stream is not
// read; closing the body ends it.
func CheckSSE(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Permanent(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // its text repeats the URL
		}
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("GET %s: status %d (want 200)", u, resp.StatusCode)
	case mt != "text/event-stream":
		return fmt.Errorf("GET %s: Content-Type %q (want text/event-stream)", u, ct)
	}
	return nil
}
