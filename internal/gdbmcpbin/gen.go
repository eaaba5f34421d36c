//go:build ignore

// gen builds cmd/gdbmcp for every architecture sandboxkit ships it for and
// writes the gzipped binaries that package gdbmcpbin embeds. Run it with
// `go generate ./internal/gdbmcpbin` after changing cmd/gdbmcp, and commit the
// result; TestEmbeddedBinariesAreCurrent fails when they are stale.
//
// The build is reproducible: same source and same Go release give the same
// bytes (-trimpath, no build ID, no VCS stamp, pinned GOAMD64/GOARM64).
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

var arches = []string{"amd64", "arm64"}

func main() {
	out := flag.String("o", ".", "output directory")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gdbmcpbin gen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	tmp, err := os.MkdirTemp("", "gdbmcp-build-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, arch := range arches {
		bin := filepath.Join(tmp, "gdbmcp-"+arch)
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
			"-ldflags=-s -w -buildid=", "-o", bin, "github.com/sandboxkit/sandboxkit/cmd/gdbmcp")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
			"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=", "GOEXPERIMENT=")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building gdbmcp for linux/%s: %w", arch, err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(data)
		if err := zw.Close(); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "gdbmcp-linux-"+arch+".gz"), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	// The Go release decides the bytes; record it so a test on another
	// release can tell staleness from a different compiler.
	version := strings.TrimSpace(runtime.Version())
	if v, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		version = strings.TrimSpace(string(v))
	}
	return os.WriteFile(filepath.Join(out, "GOVERSION"), []byte(version+"\n"), 0o644)
}
