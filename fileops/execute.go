package fileops

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/backend"
)

// ExecuteResult is what Execute ran into. String gives the agent's view.
type ExecuteResult struct {
	// Output is stdout and stderr interleaved as the command wrote them.
	// When it was longer than Options.OutputLimit, Output keeps its first
	// and last halves around a line "[... output truncated: N bytes
	// omitted ...]" and Truncated is set.
	Output    string
	ExitCode  int
	TimedOut  bool
	Truncated bool
	Duration  time.Duration
	// Timeout is the timeout the command ran with.
	Timeout time.Duration
}

// String returns the agent-visible text: the output (ending with a
// newline), then "Command timed out after N seconds" after a timeout, then
// "Exit code: N".
func (r ExecuteResult) String() string {
	var b strings.Builder
	out := strings.ToValidUTF8(r.Output, "\uFFFD")
	b.WriteString(out)
	if out != "" && !strings.HasSuffix(out, "\n") {
		b.WriteByte('\n')
	}
	if r.TimedOut {
		if r.Timeout > 0 {
			fmt.Fprintf(&b, "Command timed out after %s seconds\n", formatSeconds(r.Timeout))
		} else {
			b.WriteString("Command timed out\n")
		}
	}
	fmt.Fprintf(&b, "Exit code: %d", r.ExitCode)
	return b.String()
}

// formatSeconds prints d in seconds without a trailing ".0" ("1800", "0.5").
func formatSeconds(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10)
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// Execute runs command with sh -c in the sandbox's working directory and
// returns its combined output and exit code. timeout 0 means
// Options.ExecuteTimeout. A non-zero exit and a timeout (exit code 124) are
// results, not errors; the error is for an empty command or a negative
// timeout (*ToolError) and for failures of the backend or ctx, in which case
// the result holds what was captured so far.
func (t *Tools) Execute(ctx context.Context, command string, timeout time.Duration) (ExecuteResult, error) {
	if strings.TrimSpace(command) == "" {
		return ExecuteResult{}, toolErr(nil, "Error: command is empty")
	}
	if timeout < 0 {
		return ExecuteResult{}, toolErr(nil, "Error: timeout must not be negative (got %s)", timeout)
	}
	if timeout == 0 {
		timeout = t.opts.ExecuteTimeout
	}
	out := newOutputBuffer(t.opts.OutputLimit)
	// One writer for both streams keeps them in the order they were
	// written; the backend does not cap writers, outputBuffer does.
	res, err := t.sb.Exec(ctx, backend.ExecRequest{Shell: command, Stdout: out, Stderr: out, Timeout: timeout})
	text, truncated := out.result()
	r := ExecuteResult{
		Output:    text,
		ExitCode:  res.ExitCode,
		TimedOut:  res.TimedOut,
		Truncated: truncated || res.Truncated,
		Duration:  res.Duration,
		Timeout:   timeout,
	}
	return r, err
}

// outputBuffer is an io.Writer, safe for concurrent use, that keeps the
// first and the last halves of limit bytes and counts the rest, which it
// drops, so a command printing gigabytes costs no memory. A negative limit
// keeps everything.
type outputBuffer struct {
	mu      sync.Mutex
	headCap int64 // -1: no limit
	tailCap int64
	head    []byte
	tail    []byte // the last tailCap bytes after head, with slack
	total   int64
}

func newOutputBuffer(limit int64) *outputBuffer {
	if limit < 0 {
		return &outputBuffer{headCap: -1}
	}
	return &outputBuffer{headCap: limit - limit/2, tailCap: limit / 2}
}

func (b *outputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if b.headCap < 0 {
		b.head = append(b.head, p...)
		return n, nil
	}
	if room := b.headCap - int64(len(b.head)); room > 0 {
		k := min(room, int64(len(p)))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	switch {
	case len(p) == 0 || b.tailCap == 0:
	case int64(len(p)) >= b.tailCap:
		b.tail = append(b.tail[:0], p[int64(len(p))-b.tailCap:]...)
	default:
		b.tail = append(b.tail, p...)
		// Compact once the slack equals the kept size: amortised O(1) a
		// byte, at most 2*tailCap bytes held.
		if int64(len(b.tail)) > 2*b.tailCap {
			b.tail = b.tail[:copy(b.tail, b.tail[int64(len(b.tail))-b.tailCap:])]
		}
	}
	return n, nil
}

// result returns the kept output, with a marker line where bytes were
// dropped, and whether any were.
func (b *outputBuffer) result() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	head, tail := b.head, b.tail
	if int64(len(tail)) > b.tailCap && b.headCap >= 0 {
		tail = tail[int64(len(tail))-b.tailCap:]
	}
	omitted := b.total - int64(len(head)) - int64(len(tail))
	if omitted == 0 {
		return string(head) + string(tail), false
	}
	// Do not show characters cut in half at either edge.
	if i := lastRuneStart(head); i >= 0 && !utf8.FullRune(head[i:]) {
		omitted += int64(len(head) - i)
		head = head[:i]
	}
	for k := 0; k < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); k++ {
		tail = tail[1:]
		omitted++
	}
	var s strings.Builder
	s.Write(head)
	if len(head) > 0 && head[len(head)-1] != '\n' {
		s.WriteByte('\n')
	}
	fmt.Fprintf(&s, "[... output truncated: %d bytes omitted ...]\n", omitted)
	s.Write(tail)
	return s.String(), true
}

// lastRuneStart returns the index of the start byte of the last (possibly
// incomplete) multi-byte UTF-8 sequence in the last few bytes of p, or -1.
func lastRuneStart(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if p[i] < utf8.RuneSelf {
				return -1
			}
			return i
		}
	}
	return -1
}
