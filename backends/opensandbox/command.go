package opensandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
)

// errStreamEnded: the command stream ended before its terminal event.
var errStreamEnded = errors.New("execd ended the command stream before the command finished")

// commandStream is the answer of POST /command: a stream of events.
type commandStream struct {
	resp *http.Response
	er   *eventReader
}

func (c *commandStream) Close() error { return c.resp.Body.Close() }

// runCommand starts a command. Failures before the stream starts (a bad
// request, an unknown working directory on newer execd) are *APIError.
func (x *execd) runCommand(ctx context.Context, body runCommandRequest) (*commandStream, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := x.request(ctx, http.MethodPost, "/command", nil, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := x.do(req)
	if err != nil {
		return nil, err
	}
	return &commandStream{resp: resp, er: newEventReader(resp.Body)}, nil
}

// interrupt ends a command and its process group (execd sends SIGTERM,
// then SIGKILL after 3 s).
func (x *execd) interrupt(ctx context.Context, id string) error {
	return x.json(ctx, http.MethodDelete, "/command", map[string][]string{"id": {id}}, nil, nil)
}

// outcome is what a command's event stream said.
type outcome struct {
	id string
	// done: the terminal event arrived; then exactly one of exitCode
	// (with killedBy for execd's -1) and startErr describes it.
	done     bool
	exitCode int
	killedBy string // e.g. "signal: killed", when execd reports exit code -1
	startErr string // execd could not start the command
	// stdout and stderr are the text of execd's output events, as lines.
	stdout, stderr strings.Builder
}

// maxEventText bounds the event text an outcome keeps.
const maxEventText = 64 << 10

// readEvents reads a command stream up to its terminal event: exit 0 is
// execution_complete; any other exit is only an error event whose evalue
// is the exit code ("-1" with a traceback such as "signal: killed" when
// the process died of a signal, e.g. execd's own timeout); an evalue that
// is not a number means the command did not start. onInit receives the
// command's id as soon as the init event brings it.
func readEvents(s *commandStream, onInit func(id string)) (*outcome, error) {
	return readEventsKeeping(s, onInit, maxEventText)
}

// readEventsKeeping is readEvents keeping up to maxText bytes of each
// output's text.
func readEventsKeeping(s *commandStream, onInit func(id string), maxText int) (*outcome, error) {
	oc := &outcome{}
	for {
		ev, err := s.er.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errStreamEnded
			}
			return oc, err
		}
		switch ev.Type {
		case eventInit:
			oc.id = ev.Text
			if onInit != nil && ev.Text != "" {
				onInit(ev.Text)
			}
		case eventStdout:
			appendLine(&oc.stdout, ev.Text, maxText)
		case eventStderr:
			appendLine(&oc.stderr, ev.Text, maxText)
		case eventExecutionComplete:
			oc.done = true
			return oc, nil
		case eventErr:
			oc.done = true
			if ev.Error == nil {
				oc.startErr = "execd reported an error without details"
				return oc, nil
			}
			code, err := strconv.Atoi(strings.TrimSpace(ev.Error.EValue))
			switch {
			case err != nil:
				oc.startErr = strings.TrimSpace(ev.Error.EName + ": " + ev.Error.EValue)
			case code < 0:
				oc.exitCode = -1
				oc.killedBy = strings.Join(ev.Error.Traceback, "; ")
			default:
				oc.exitCode = code
			}
			return oc, nil
		}
		// status, result, execution_count, ping and unknown types carry
		// nothing a shell command needs.
	}
}

// appendLine adds one output event's text, unless b holds maxText bytes
// already. execd sends output line by
// line without the line end ("\n" alone for an empty line); a text that
// ends in "\n" already is kept as it is.
func appendLine(b *strings.Builder, text string, maxText int) {
	if b.Len() >= maxText {
		return
	}
	b.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
}

// signalExit turns execd's traceback for a killed process ("signal:
// killed") into 128+N; 0 when it names no signal this package knows.
func signalExit(traceback string) int {
	_, name, ok := strings.Cut(traceback, "signal: ")
	if !ok {
		return 0
	}
	name, _, _ = strings.Cut(name, ";")
	name = strings.TrimSpace(name)
	for n := syscall.Signal(1); n < 65; n++ {
		if n.String() == name {
			return 128 + int(n)
		}
	}
	return 0
}

// runQuick runs a short command and returns its output from the event
// stream. It is for the backend's own probes, whose output is one line of
// text: the stream carries text by lines, not bytes.
func (s *Sandbox) runQuick(ctx context.Context, command string) (*outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, s.b.cfg.requestTimeout())
	defer cancel()
	x, err := s.execd(ctx)
	if err != nil {
		return nil, err
	}
	stream, err := x.runCommand(ctx, runCommandRequest{Command: command})
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	oc, err := readEvents(stream, nil)
	if err != nil {
		return nil, err
	}
	if oc.startErr != "" {
		return oc, fmt.Errorf("execd could not run a command: %s", oc.startErr)
	}
	return oc, nil
}
