package opensandbox

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// The fuzz targets cover what this package decodes from the server and the
// sandbox: execd's command stream (events, outcomes, the wrapper's report),
// error bodies, timestamps and the metadata labels are stored in.
//
//	go test -run '^$' -fuzz '^FuzzEventStream$' -fuzztime 30s ./backends/opensandbox/

// readAllEvents reads events until the stream ends or fails; it fails the
// test if the reader does not make progress.
func readAllEvents(t *testing.T, r io.Reader, limit int) ([]event, error) {
	er := newEventReader(r)
	var out []event
	for range limit {
		ev, err := er.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	t.Fatalf("more than %d events from a stream of at most %d bytes", limit, limit)
	return nil, nil
}

// FuzzEventStream feeds arbitrary bytes to the event reader and the
// outcome reader: no panic, no endless loop, and every event it returns
// encodes back to one it reads again. Well-formed events appended after a
// blank line are read back unchanged, whatever pieces the bytes come in.
func FuzzEventStream(f *testing.F) {
	for _, s := range []string{
		"{\"type\":\"init\",\"text\":\"abc\"}\n\n{\"type\":\"stdout\",\"text\":\"hi\"}\n\n{\"type\":\"execution_complete\",\"execution_time\":3}\n\n",
		": keep-alive\nevent: message\nid: 1\ndata: {\"type\":\"init\",\"text\":\"x\"}\n\ndata:{\"type\":\"ping\"}\r\n\r\n",
		"{\"type\":\n\"stdout\",\n\"text\":\"multi\"}\n\n",
		"{\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"-1\",\"traceback\":[\"signal: killed\"]}}\n\n",
		"{\"type\":\"init\"\n\n",
		"{\"type\":\"std",
		"data: [1,2]\n\n",
		"\"just a string\"\n\n{}\n\n",
	} {
		f.Add([]byte(s), "tail text \u00e9\x01")
	}
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		evs, err := readAllEvents(t, bytes.NewReader(data), len(data)+1)
		if err == nil {
			t.Fatal("a stream ended without io.EOF or an error")
		}
		for _, ev := range evs {
			b, merr := json.Marshal(ev)
			if merr != nil {
				t.Fatalf("event %+v does not encode: %v", ev, merr)
			}
			again, rerr := readAllEvents(t, bytes.NewReader(append(b, '\n', '\n')), len(b)+3)
			if !errors.Is(rerr, io.EOF) || len(again) != 1 || again[0].Type != ev.Type || again[0].Text != ev.Text {
				t.Fatalf("event %s read back as %+v, %v", b, again, rerr)
			}
		}
		_, _ = readEvents(&commandStream{er: newEventReader(bytes.NewReader(data))}, func(string) {})

		// A clean stream read through pieces of any size.
		if err != io.EOF {
			return
		}
		b, _ := json.Marshal(event{Type: eventStdout, Text: text})
		var want event // as JSON carries it: invalid UTF-8 replaced
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		stream := append(append(append([]byte{}, data...), '\n', '\n'), append(b, '\n', '\n')...)
		for _, r := range []io.Reader{bytes.NewReader(stream), iotest.OneByteReader(bytes.NewReader(stream)), iotest.HalfReader(bytes.NewReader(stream))} {
			got, err := readAllEvents(t, r, len(stream)+1)
			if !errors.Is(err, io.EOF) || len(got) != len(evs)+1 {
				t.Fatalf("%d events then %v reading the stream again with an event appended, want %d", len(got), err, len(evs)+1)
			}
			if last := got[len(got)-1]; last.Type != want.Type || last.Text != want.Text {
				t.Fatalf("appended event read back as %+v", last)
			}
		}
	})
}

// reportText is what execd streams for the wrapper's report of out and
// err: base64 as the tool prints it (76-column lines), one event a line.
func reportText(id string, out, err []byte) string {
	var b strings.Builder
	m := "sbxio:" + id + ":"
	lines := func(data []byte) {
		s := base64.StdEncoding.EncodeToString(data)
		for len(s) > 76 {
			appendLine(&b, s[:76], reportMaxText)
			s = s[76:]
		}
		if s != "" {
			appendLine(&b, s, reportMaxText)
		}
	}
	appendLine(&b, m+"size:"+itoa(len(out))+":"+itoa(len(err)), reportMaxText)
	appendLine(&b, m+"out", reportMaxText)
	lines(out)
	appendLine(&b, m+"err", reportMaxText)
	lines(err)
	appendLine(&b, m+"end", reportMaxText)
	return b.String()
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// FuzzParseReport: any output comes back byte-exact from its report, and
// arbitrary text never makes a complete report whose data disagrees with
// its sizes.
func FuzzParseReport(f *testing.F) {
	f.Add([]byte("hi\n"), []byte("a\rb\x00\xff"), "sbxio:x:size:1:0\nsbxio:x:end\n")
	f.Add([]byte{}, []byte{}, "sbxio:x:size:0:0\nsbxio:x:out\nsbxio:x:err\nsbxio:x:end\n")
	f.Add(bytes.Repeat([]byte{0xff}, 200), []byte("\n\n"), "noise\nsbxio:x:size:-1:2\n")
	f.Fuzz(func(t *testing.T, out, errb []byte, text string) {
		rep := parseReport(reportText("x", out, errb), "x")
		if !rep.complete || !bytes.Equal(rep.data[0], out) || !bytes.Equal(rep.data[1], errb) {
			t.Fatalf("report of %q, %q read back as %+v", out, errb, rep)
		}
		rep = parseReport(text, "x")
		if rep.complete && (int64(len(rep.data[0])) != rep.size[0] || int64(len(rep.data[1])) != rep.size[1]) {
			t.Fatalf("complete report with data that does not match its sizes: %+v", rep)
		}
		if rep.size[0] < 0 || rep.size[1] < 0 {
			t.Fatalf("negative sizes: %+v", rep)
		}
	})
}

// FuzzErrorBody: any answer body gives a code and a message, without panic.
func FuzzErrorBody(f *testing.F) {
	for _, s := range []string{
		`{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"Sandbox x not found."}`,
		`{"detail":[{"type":"missing","loc":["body",1,null],"msg":"Field required"}]}`,
		`{"detail":{"code":"X","message":"y"}}`,
		`{"detail":"Not Found"}`,
		`{"error":"Unauthorized"}`,
		`{"error":{"nested":true}}`,
		"404 page not found\n",
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		parseErrorBody(body)
	})
}

// FuzzWireTime: any JSON value is a time or an error, without panic; what
// decodes encodes back to the same instant.
func FuzzWireTime(f *testing.F) {
	for _, s := range []string{`"2026-01-02T03:04:05Z"`, `"2026-01-02T03:04:05.123456+00:00"`, `"2026-01-02 03:04:05"`, `null`, `""`, `12`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var wt wireTime
		if err := wt.UnmarshalJSON(data); err != nil {
			return
		}
		b, err := wt.MarshalJSON()
		if err != nil {
			// Years outside 0-9999 do not encode as RFC 3339.
			return
		}
		var again wireTime
		if err := again.UnmarshalJSON(b); err != nil || !again.Equal(wt.Time) {
			t.Fatalf("%s -> %s -> %v, %v", data, b, again, err)
		}
	})
}

// FuzzLabels: labels of any content are stored within the server's label
// rules and read back unchanged; any metadata the server holds decodes
// without panic.
func FuzzLabels(f *testing.F) {
	f.Add("sandboxkit.owner", "host:1:2", "x--key", "x1.abc")
	f.Add("Not A Key!", "with spaces & symbols", "k.2", "")
	f.Add("long", strings.Repeat("v", 250), "opensandbox.io/x", "y")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		decodeLabels(map[string]string{k1: v1, k2: v2})
		labels := map[string]string{k1: v1, k2: v2}
		md, err := encodeLabels(labels)
		if err != nil {
			return // too long to store: refused, not mangled
		}
		for k, v := range md {
			if !validLabelKey(k) || !validLabelValue(v) {
				t.Fatalf("stored %q=%q breaks the label rules", k, v)
			}
		}
		got := decodeLabels(md)
		for k, v := range labels {
			if got[k] != v {
				t.Fatalf("label %q=%q read back as %q (stored %v)", k, v, got[k], md)
			}
		}
	})
}

// FuzzTerminalOutput checks the filter that drops a terminal's output up
// to the marker line the typed line prints: however execd splits the
// output into frames, what follows the marker line passes whole, and
// nothing before it does.
func FuzzTerminalOutput(f *testing.F) {
	f.Add([]byte("bash-5.2# printf '\\163bx-go-%s\\n'\r\n"), []byte("hello\r\n$ "), uint8(3))
	f.Add([]byte(""), []byte(""), uint8(1))
	f.Add([]byte("sbx-go-"), []byte("sbx-go-s1\n"), uint8(7))
	f.Fuzz(func(t *testing.T, before, after []byte, chunk uint8) {
		marker := "sbx-go-s1"
		if bytes.Contains(before, []byte(marker)) || len(before) > maxBeforeMarker/2 {
			return
		}
		stream := append(append(append([]byte{}, before...), marker+"\r\n"...), after...)
		var got bytes.Buffer
		m := &markerFilter{w: &got, marker: []byte(marker), seen: make(chan struct{})}
		n := int(chunk%16) + 1
		for len(stream) > 0 {
			k := min(n, len(stream))
			if w, err := m.Write(stream[:k]); err != nil || w != k {
				t.Fatalf("Write = %d, %v", w, err)
			}
			stream = stream[k:]
		}
		if !bytes.Equal(got.Bytes(), after) {
			t.Fatalf("passed %q, want %q", got.Bytes(), after)
		}
		select {
		case <-m.seen:
		default:
			t.Fatal("the marker went by unseen")
		}
		q := ansiQuote(string(before))
		for i := 0; i < len(q); i++ {
			if q[i] < 0x20 || q[i] >= 0x7f {
				t.Fatalf("ansiQuote(%q) = %q: byte %#x reaches the line editor", before, q, q[i])
			}
		}
	})
}
