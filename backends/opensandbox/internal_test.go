package opensandbox

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// events reads every event of a stream.
func events(t *testing.T, r io.Reader) ([]event, error) {
	t.Helper()
	er := newEventReader(r)
	var out []event
	for {
		ev, err := er.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestEventReader(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream string
		want   []string // type:text
		err    string
	}{
		{
			name:   "raw JSON events, blank line after each (execd)",
			stream: "{\"type\":\"init\",\"text\":\"abc\"}\n\n{\"type\":\"stdout\",\"text\":\"hi\"}\n\n{\"type\":\"execution_complete\",\"execution_time\":3}\n\n",
			want:   []string{"init:abc", "stdout:hi", "execution_complete:"},
		},
		{
			name:   "data: prefix tolerated, with SSE fields and comments",
			stream: ": keep-alive\nevent: message\nid: 1\ndata: {\"type\":\"init\",\"text\":\"x\"}\n\ndata:{\"type\":\"ping\"}\r\n\r\n",
			want:   []string{"init:x", "ping:"},
		},
		{
			name:   "no blank line between events",
			stream: "{\"type\":\"stdout\",\"text\":\"a\"}\n{\"type\":\"stderr\",\"text\":\"b\"}\n",
			want:   []string{"stdout:a", "stderr:b"},
		},
		{
			name:   "an event spread over lines",
			stream: "{\"type\":\n\"stdout\",\n\"text\":\"multi\"}\n\n",
			want:   []string{"stdout:multi"},
		},
		{
			name:   "last event without trailing newline",
			stream: "{\"type\":\"init\",\"text\":\"1\"}\n\n{\"type\":\"execution_complete\"}",
			want:   []string{"init:1", "execution_complete:"},
		},
		{
			name:   "text with JSON escapes and newlines",
			stream: "{\"type\":\"stdout\",\"text\":\"a\\nb\\u0001\\\"q\\\"\"}\n\n",
			want:   []string{"stdout:a\nb\x01\"q\""},
		},
		{
			name:   "malformed event",
			stream: "{\"type\":\"init\"\n\n",
			err:    "malformed event",
		},
		{
			name:   "stream cut inside an event",
			stream: "{\"type\":\"init\",\"text\":\"1\"}\n\n{\"type\":\"std",
			want:   []string{"init:1"},
			err:    "unexpected EOF",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			// One byte per read: events arrive in pieces, lines too.
			for _, r := range []io.Reader{strings.NewReader(c.stream), iotest.OneByteReader(strings.NewReader(c.stream)), iotest.HalfReader(strings.NewReader(c.stream))} {
				evs, err := events(t, r)
				var got []string
				for _, ev := range evs {
					got = append(got, ev.Type+":"+ev.Text)
				}
				assert.Equal(t, c.want, got)
				if c.err == "" {
					assert.NoError(t, err)
				} else {
					assert.ErrorContains(t, err, c.err)
				}
			}
		})
	}
}

// blockingReader returns its data, then blocks until closed: a stream the
// server holds open after the last event.
type blockingReader struct {
	data   *strings.Reader
	closed chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if b.data.Len() > 0 {
		return b.data.Read(p)
	}
	<-b.closed
	return 0, io.ErrClosedPipe
}

func TestReadEventsStopsAtTheTerminalEvent(t *testing.T) {
	for _, c := range []struct {
		name     string
		terminal string
		exit     int
		killedBy string
		startErr string
	}{
		{"exit 0", `{"type":"execution_complete","execution_time":5}`, 0, "", ""},
		{"exit 3 as an error event", `{"type":"error","error":{"ename":"CommandExecError","evalue":"3","traceback":["exit status 3"]}}`, 3, "", ""},
		{"killed (execd timeout)", `{"type":"error","error":{"ename":"CommandExecError","evalue":"-1","traceback":["signal: killed"]}}`, -1, "signal: killed", ""},
		{"did not start", `{"type":"error","error":{"ename":"CommandExecError","evalue":"fork/exec /bin/bash: no such file or directory"}}`, 0, "", "CommandExecError: fork/exec /bin/bash: no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			br := &blockingReader{
				data:   strings.NewReader(`{"type":"init","text":"cmd-1"}` + "\n\n" + `{"type":"stdout","text":"line"}` + "\n\n" + `{"type":"stdout","text":"\n"}` + "\n\n" + `{"type":"stderr","text":"oops"}` + "\n\n" + c.terminal + "\n\n"),
				closed: make(chan struct{}),
			}
			defer close(br.closed)
			var gotID string
			done := make(chan struct{})
			var oc *outcome
			var err error
			go func() {
				defer close(done)
				oc, err = readEvents(&commandStream{er: newEventReader(br)}, func(id string) { gotID = id })
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("readEvents waited past the terminal event")
			}
			require.NoError(t, err)
			assert.Equal(t, "cmd-1", gotID)
			assert.True(t, oc.done)
			assert.Equal(t, c.exit, oc.exitCode)
			assert.Equal(t, c.killedBy, oc.killedBy)
			assert.Equal(t, c.startErr, oc.startErr)
			assert.Equal(t, "line\n\n", oc.stdout.String(), "lines rebuilt from execd's line events")
			assert.Equal(t, "oops\n", oc.stderr.String())
		})
	}
	t.Run("stream ends without a terminal event", func(t *testing.T) {
		_, err := readEvents(&commandStream{er: newEventReader(strings.NewReader(`{"type":"init","text":"x"}` + "\n\n"))}, nil)
		assert.ErrorIs(t, err, errStreamEnded)
	})
}

func TestSignalExit(t *testing.T) {
	assert.Equal(t, 137, signalExit("signal: killed"))
	assert.Equal(t, 143, signalExit("signal: terminated"))
	assert.Equal(t, 130, signalExit("signal: interrupt; more"))
	assert.Equal(t, 0, signalExit("exit status 1"))
	assert.Equal(t, 0, signalExit("signal: no such thing"))
}

func TestErrorShapes(t *testing.T) {
	for _, c := range []struct {
		name          string
		body          string
		code, message string
	}{
		{"code and message", `{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"Sandbox x not found."}`, "DOCKER::SANDBOX_NOT_FOUND", "Sandbox x not found."},
		{"FastAPI validation list", `{"detail":[{"type":"greater_than_equal","loc":["body","timeout"],"msg":"Input should be greater than or equal to 60","input":5},{"type":"missing","loc":["body","entrypoint"],"msg":"Field required"}]}`,
			"VALIDATION_ERROR", "body.timeout: Input should be greater than or equal to 60; body.entrypoint: Field required"},
		{"FastAPI detail string", `{"detail":"Not Found"}`, "", "Not Found"},
		{"FastAPI detail object", `{"detail":{"code":"SANDBOX::INVALID_PORT","message":"Port must be between 1 and 65535."}}`, "SANDBOX::INVALID_PORT", "Port must be between 1 and 65535."},
		{"execd 401", `{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}`, "", "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"},
		{"plain text", "404 page not found\n", "", "404 page not found"},
		{"empty", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, msg := parseErrorBody([]byte(c.body))
			assert.Equal(t, c.code, code)
			assert.Equal(t, c.message, msg)
		})
	}
}

func TestAPIErrorSentinels(t *testing.T) {
	for status, want := range map[int]error{
		http.StatusNotFound:            backend.ErrNotFound,
		http.StatusBadRequest:          backend.ErrInvalidConfig,
		http.StatusUnauthorized:        backend.ErrInvalidConfig,
		http.StatusForbidden:           backend.ErrInvalidConfig,
		http.StatusUnprocessableEntity: backend.ErrInvalidConfig,
		http.StatusMethodNotAllowed:    errors.ErrUnsupported,
		http.StatusNotImplemented:      errors.ErrUnsupported,
		http.StatusBadGateway:          backend.ErrUnavailable,
		http.StatusServiceUnavailable:  backend.ErrUnavailable,
		http.StatusGatewayTimeout:      backend.ErrUnavailable,
	} {
		err := &APIError{Service: ServiceLifecycle, Method: "GET", Path: "/v1/sandboxes/x", Status: status}
		assert.ErrorIs(t, err, want, "status %d", status)
	}
	err := &APIError{Service: ServiceLifecycle, Method: "GET", Path: "/v1/sandboxes", Status: 500, Code: "X", Message: "boom"}
	assert.Nil(t, err.Unwrap())
	assert.Equal(t, "lifecycle server: GET /v1/sandboxes: 500 Internal Server Error: X: boom", err.Error())
	err = &APIError{Service: ServiceLifecycle, Method: "GET", Path: "/v1/sandboxes", Status: 401, Code: "INVALID_API_KEY"}
	assert.Contains(t, err.Error(), "check [sandbox.opensandbox] api_key or OPEN_SANDBOX_API_KEY")
}

func TestLabelsRoundTrip(t *testing.T) {
	long := strings.Repeat("0123456789", 30) // 300 bytes: 8 pieces
	labels := map[string]string{
		"sandboxkit.name":                "main",
		"sandboxkit.session":             "s-1",
		"sandboxkit.owner":               "build-host.example.com:12345:987654321",
		"sandboxkit.opensandbox.workdir": "/home/agent/work dir",
		"plain":                          "",
		"looks.encoded":                  "x1.abc",
		"x--looks-like-a-key":            "v",
		"name.2":                         "like a continuation key",
		"example.com/team":               "ml",
		"Not A Key!":                     "with spaces & symbols",
		"opensandbox.io/owned":           "reserved prefix",
		"long":                           long,
		"unicode":                        "héllo wörld",
	}
	md, err := encodeLabels(labels)
	require.NoError(t, err)
	for k, v := range md {
		assert.True(t, validLabelKey(k), "stored key %q breaks the label rules", k)
		assert.True(t, validLabelValue(v), "stored value %q (key %q) breaks the label rules", v, k)
	}
	assert.Equal(t, "main", md["sandboxkit.name"], "valid labels are stored as they are")
	assert.Equal(t, "", md["plain"])
	assert.Equal(t, labels, decodeLabels(md))

	_, err = encodeLabels(map[string]string{"k": strings.Repeat("x", 400)})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	_, err = encodeLabels(map[string]string{strings.Repeat("k", 40) + "!": "v"})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)

	// Foreign metadata that merely looks encoded is kept as it is.
	assert.Equal(t, map[string]string{"a": "x2.notbase32", "x--!!": "v"}, decodeLabels(map[string]string{"a": "x2.notbase32", "x--!!": "v"}))
}

func TestMetadataFilter(t *testing.T) {
	got := metadataFilter(map[string]string{
		"sandboxkit.backend": "opensandbox",
		"sandboxkit.owner":   "h:1:2", // encoded, one piece
		"long":               strings.Repeat("y", 200),
	})
	assert.Equal(t, "sandboxkit.backend=opensandbox&sandboxkit.owner=x1.na5dcors", got, "values in several pieces are left to the client")
}

func TestOctalMode(t *testing.T) {
	for perm, want := range map[uint32]int{0o755: 755, 0o644: 644, 0o600: 600, 0o7: 7, 0: 0, 0o1777: 1777} {
		assert.Equal(t, want, octalMode(perm))
		assert.Equal(t, perm, modeFromOctal(want))
	}
}

func TestWireTime(t *testing.T) {
	for _, s := range []string{`"2026-01-02T03:04:05Z"`, `"2026-01-02T03:04:05.123456+00:00"`, `"2026-01-02T03:04:05.123456"`, `"2026-01-02 03:04:05+00:00"`} {
		var wt wireTime
		require.NoError(t, wt.UnmarshalJSON([]byte(s)), s)
		assert.Equal(t, 2026, wt.Year(), s)
		assert.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), wt.UTC().Truncate(time.Second), s)
	}
	var wt wireTime
	require.NoError(t, wt.UnmarshalJSON([]byte("null")))
	assert.True(t, wt.IsZero())
	assert.Error(t, wt.UnmarshalJSON([]byte(`"yesterday"`)))
}

func TestResourceLimits(t *testing.T) {
	for _, c := range []struct {
		r    backend.Resources
		want map[string]string
		err  error
	}{
		{backend.Resources{}, map[string]string{"cpu": "1", "memory": "2Gi"}, nil},
		{backend.Resources{CPUs: 2, MemoryBytes: 512 << 20}, map[string]string{"cpu": "2", "memory": "512Mi"}, nil},
		{backend.Resources{CPUs: 0.5, MemoryBytes: 3 << 30, GPUs: "1"}, map[string]string{"cpu": "500m", "memory": "3Gi", "gpu": "1"}, nil},
		{backend.Resources{CPUs: 1.25, MemoryBytes: 1000}, map[string]string{"cpu": "1250m", "memory": "1000"}, nil},
		{backend.Resources{GPUs: "all"}, nil, errors.ErrUnsupported},
		{backend.Resources{GPUs: "0,1"}, nil, errors.ErrUnsupported},
		{backend.Resources{CPUs: -1}, nil, backend.ErrInvalidConfig},
	} {
		got, err := resourceLimits(c.r)
		if c.err != nil {
			assert.ErrorIs(t, err, c.err, "%+v", c.r)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%+v", c.r)
	}
}

func TestVolumes(t *testing.T) {
	got, err := volumes([]backend.Volume{
		{Type: backend.VolumeBind, Source: "/srv/data/", Target: "/data", ReadOnly: true},
		{Type: backend.VolumeNamed, Source: "shared-1", Target: "/Shared/Deep_Dir"},
	})
	require.NoError(t, err)
	assert.Equal(t, []volumeJSON{
		{Name: "v0-data", Host: &hostVol{Path: "/srv/data"}, MountPath: "/data", ReadOnly: true},
		{Name: "v1-shared-deep-dir", PVC: &pvcVol{ClaimName: "shared-1"}, MountPath: "/Shared/Deep_Dir"},
	}, got)
	_, err = volumes([]backend.Volume{{Type: backend.VolumeNamed, Source: "My_Volume", Target: "/x"}})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, `"My_Volume:/x"`)
	_, err = volumes([]backend.Volume{{Type: backend.VolumeBind, Source: "relative", Target: "/x"}})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
}

func TestSetupFailure(t *testing.T) {
	msg, ok := setupFailure("bash: warning\n" + setupMarker + " cannot create /tmp/.sbx-exec-1 (is the sandbox's TMPDIR writable?)\n")
	assert.True(t, ok)
	assert.Equal(t, "preparing the command in the sandbox: cannot create /tmp/.sbx-exec-1 (is the sandbox's TMPDIR writable?)", msg)
	_, ok = setupFailure("ordinary stderr\n")
	assert.False(t, ok)
}

func TestShellQuote(t *testing.T) {
	assert.Equal(t, `'it'\''s'`, shellQuote("it's"))
	assert.Equal(t, `''`, shellQuote(""))
}

func TestParseReport(t *testing.T) {
	const id = "abc123"
	m := "sbxio:" + id + ":"
	for _, c := range []struct {
		name            string
		stdout          string
		sized, complete bool
		size            [2]int64
		out, err        string
	}{
		{"nothing", "", false, false, [2]int64{}, "", ""},
		{"empty files", m + "size:0:0\n" + m + "end\n", true, true, [2]int64{}, "", ""},
		{"both files", m + "size:3:7\n" + m + "out\naGkK\n" + m + "err\nYQ1i\nXHgw\nMA==\n" + m + "end\n", true, true, [2]int64{3, 7}, "hi\n", "a\rb\\x00"},
		{"sizes only (large, or no base64)", m + "size:100000:0\n", true, false, [2]int64{100000, 0}, "", ""},
		{"cut before the end", m + "size:3:0\n" + m + "out\naGkK\n", true, false, [2]int64{3, 0}, "", ""},
		{"size does not match", m + "size:4:0\n" + m + "out\naGkK\n" + m + "err\n" + m + "end\n", true, false, [2]int64{4, 0}, "", ""},
		{"bad base64", m + "size:3:0\n" + m + "out\na!kK\n" + m + "err\n" + m + "end\n", true, false, [2]int64{3, 0}, "", ""},
		{"another command's report", "sbxio:other:size:0:0\nsbxio:other:end\n", false, false, [2]int64{}, "", ""},
		{"bad size", m + "size:x:0\n" + m + "end\n", false, false, [2]int64{}, "", ""},
		{"stray lines before", "noise\n" + m + "size:0:0\n" + m + "end\n", true, true, [2]int64{}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := parseReport(c.stdout, id)
			assert.Equal(t, c.sized, rep.sized)
			assert.Equal(t, c.complete, rep.complete)
			assert.Equal(t, c.size, rep.size)
			if c.complete {
				assert.Equal(t, c.out, string(rep.data[0]))
				assert.Equal(t, c.err, string(rep.data[1]))
			}
		})
	}
}

// The report script, run by bash as execd runs the wrapper, reports files
// byte-exactly; without base64 it reports only their sizes, and the exit
// status the wrapper saved is kept.
func TestReportScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	binary := make([]byte, 3000)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	for _, c := range []struct {
		name     string
		out, err []byte
		path     string // PATH for the script ("": the test's)
		complete bool
	}{
		{"empty", nil, nil, "", true},
		{"binary", binary, []byte("a\r\nb\n\n"), "", true},
		{"at the inline limit", bytes.Repeat([]byte{'x'}, reportInlineMax), nil, "", true},
		{"over the inline limit", bytes.Repeat([]byte{'x'}, reportInlineMax+1), []byte("e"), "", false},
		{"no tools", []byte("hi\n"), nil, "/nonexistent", false},
		{"no tools, no output", nil, nil, "/nonexistent", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), ".sbx-exec-1")
			require.NoError(t, os.WriteFile(d+".out", c.out, 0o600))
			require.NoError(t, os.WriteFile(d+".err", c.err, 0o600))
			script := "d=" + shellQuote(d) + "\nrc=7\n"
			if c.path != "" {
				script += "PATH=" + c.path + "\n"
			}
			script += reportScript("id1") + `exit "$rc"` + "\n"
			cmd := exec.Command(bash, "-c", script)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			ee, ok := err.(*exec.ExitError)
			require.True(t, ok, "%v", err)
			assert.Equal(t, 7, ee.ExitCode(), "the wrapper's exit status")
			assert.Empty(t, stderr.String())
			// execd streams lines without their ends; rebuild as readEvents does.
			var text strings.Builder
			for line := range strings.SplitSeq(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
				appendLine(&text, line, reportMaxText)
			}
			require.Less(t, text.Len(), reportMaxText)
			rep := parseReport(text.String(), "id1")
			assert.True(t, rep.sized || c.path != "", "sizes reported")
			assert.Equal(t, c.complete, rep.complete)
			if rep.sized {
				assert.Equal(t, [2]int64{int64(len(c.out)), int64(len(c.err))}, rep.size)
			}
			if c.complete {
				assert.Equal(t, string(c.out), string(rep.data[0]))
				assert.Equal(t, string(c.err), string(rep.data[1]))
			}
		})
	}
}
