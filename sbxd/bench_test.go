package sbxd_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
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
