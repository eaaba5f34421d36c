package sbxd_test

import (
	"bytes"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
)

// Benchmarks on the local backend (host processes): the agent's own cost,
// without a container engine's stream in the way. sbx bench exec measures
// a real backend.

func BenchmarkExecTrueLocal(b *testing.B) {
	c := benchClient(b)
	req := backend.ExecRequest{Cmd: []string{"true"}}
	for b.Loop() {
		if _, err := c.Exec(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCopy64MiBLocal(b *testing.B) {
	c := benchClient(b)
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	name := b.TempDir() + "/copy"
	b.SetBytes(2 * int64(len(data)))
	for b.Loop() {
		if err := c.WriteFile(b.Context(), name, bytes.NewReader(data), 0o600); err != nil {
			b.Fatal(err)
		}
		rc, err := c.ReadFile(b.Context(), name)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, rc)
		rc.Close()
	}
}

func benchClient(b *testing.B) interface {
	backend.Sandbox
	backend.FileSystem
} {
	c, _ := createLocal(b)
	return c
}

// BenchmarkTerminalEchoNative measures a keystroke's round trip: a byte
// typed into a terminal in a native (Docker) sandbox until the terminal's
// echo of it is back, through sbxd's terminal and, in alternation in the
// same loop, through the engine's own tty exec (docker exec -it's path).
// It reports both medians and their ratio.
func BenchmarkTerminalEchoNative(b *testing.B) {
	c := createNative(b, newNative(b, native.Config{}))
	engine, ok := backend.As[backend.Terminaler](c.Unwrap())
	if !ok {
		b.Fatal("the native sandbox has no terminal of its own")
	}
	open := func(tr backend.Terminaler) backend.Terminal {
		t, err := tr.Terminal(b.Context(), backend.TerminalRequest{Cmd: []string{"cat"}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { t.Close() })
		return t
	}
	agentTerm, engineTerm := open(c), open(engine)
	key := func(t backend.Terminal) time.Duration {
		start := time.Now()
		if _, err := t.Write([]byte{'x'}); err != nil {
			b.Fatal(err)
		}
		var p [1]byte
		for p[0] != 'x' {
			if _, err := t.Read(p[:]); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	key(agentTerm)
	key(engineTerm)
	var viaAgent, viaEngine []time.Duration
	for b.Loop() {
		viaAgent = append(viaAgent, key(agentTerm))
		viaEngine = append(viaEngine, key(engineTerm))
	}
	a, e := median(viaAgent), median(viaEngine)
	b.ReportMetric(float64(a.Microseconds())/1000, "sbxd-p50-ms")
	b.ReportMetric(float64(e.Microseconds())/1000, "engine-p50-ms")
	b.ReportMetric(float64(a)/float64(e), "sbxd/engine")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
