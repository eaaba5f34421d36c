package opensandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxEventBytes bounds one event of the command stream. Our commands send
// their output to files, so events are small; a larger one means the stream
// is not what we think it is.
const maxEventBytes = 16 << 20

// eventReader reads execd's command stream. execd writes each event as one
// raw JSON object followed by a blank line, without the "data:" prefix of
// Server-Sent Events; a prefix is tolerated anyway, as are SSE comments and
// event/id/retry fields. An event is returned as soon as its JSON is
// complete, so a reader that stops at the terminal event never waits for
// the blank line or the server's trailing keep-alive.
type eventReader struct {
	r       *bufio.Reader
	pending []byte
}

func newEventReader(r io.Reader) *eventReader {
	return &eventReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next event, or io.EOF when the stream ends cleanly
// between events.
func (er *eventReader) Next() (event, error) {
	for {
		line, err := er.readLine()
		if len(line) > 0 || err == nil {
			ev, ok, perr := er.feed(line)
			if perr != nil {
				return event{}, perr
			}
			if ok {
				return ev, nil
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(bytes.TrimSpace(er.pending)) > 0 {
					return event{}, fmt.Errorf("command stream ended inside an event: %w", io.ErrUnexpectedEOF)
				}
				return event{}, io.EOF
			}
			return event{}, err
		}
	}
}

// readLine returns the next line without its terminator. A partial last
// line comes with io.EOF.
func (er *eventReader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := er.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line)+len(er.pending) > maxEventBytes {
			return nil, fmt.Errorf("command stream: event larger than %d bytes", maxEventBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		return line, err
	}
}

// feed adds one line and returns an event when one is complete.
func (er *eventReader) feed(line []byte) (event, bool, error) {
	if len(line) == 0 {
		// The blank line ends an event: what is pending must be one.
		if len(bytes.TrimSpace(er.pending)) == 0 {
			er.pending = er.pending[:0]
			return event{}, false, nil
		}
		return er.decode()
	}
	switch {
	case line[0] == ':':
		return event{}, false, nil // SSE comment
	case bytes.HasPrefix(line, []byte("data:")):
		line = bytes.TrimPrefix(line[len("data:"):], []byte(" "))
	case bytes.HasPrefix(line, []byte("event:")), bytes.HasPrefix(line, []byte("id:")), bytes.HasPrefix(line, []byte("retry:")):
		return event{}, false, nil
	}
	if len(er.pending) > 0 {
		er.pending = append(er.pending, '\n')
	}
	er.pending = append(er.pending, line...)
	if !json.Valid(er.pending) {
		return event{}, false, nil // an event spread over lines
	}
	return er.decode()
}

func (er *eventReader) decode() (event, bool, error) {
	var ev event
	err := json.Unmarshal(er.pending, &ev)
	bad := er.pending
	er.pending = nil
	if err != nil {
		const show = 200
		if len(bad) > show {
			bad = bad[:show]
		}
		return event{}, false, fmt.Errorf("command stream: malformed event %q: %v", bad, err)
	}
	return ev, true, nil
}
