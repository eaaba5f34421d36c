// Package gdbmcpbin holds prebuilt gdbmcp binaries (cmd/gdbmcp) for
// linux/amd64 and linux/arm64, so the gdb_mcp initializer can inject the
// MCP server into any image that has gdb, without a Go toolchain at run
// time.
//
// How the initializer finds the binary, first match wins:
//
//  1. binary_path in the entry's [extra] table;
//  2. the environment variable SBX_GDBMCP_PATH, a path to a static linux
//     binary for the sandbox's architecture;
//  3. the binary embedded here for the sandbox's architecture.
//
// The embedded files are made by `go generate ./internal/gdbmcpbin`
// (gen.go) and committed; a test rebuilds them and fails when they differ.
package gdbmcpbin

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

//go:generate go run gen.go -o .

// EnvPath overrides the embedded binary with a file.
const EnvPath = "SBX_GDBMCP_PATH"

//go:embed gdbmcp-linux-amd64.gz gdbmcp-linux-arm64.gz GOVERSION
var files embed.FS

var cache sync.Map // arch -> []byte

// Arches lists the architectures (GOARCH names) with an embedded binary.
func Arches() []string { return []string{"amd64", "arm64"} }

// GoVersion is the Go release the embedded binaries were built with.
func GoVersion() string {
	v, _ := files.ReadFile("GOVERSION")
	return strings.TrimSpace(string(v))
}

// Embedded returns the embedded binary for linux/arch (a GOARCH name).
func Embedded(arch string) ([]byte, error) {
	if b, ok := cache.Load(arch); ok {
		return b.([]byte), nil
	}
	gz, err := files.ReadFile("gdbmcp-linux-" + arch + ".gz")
	if err != nil {
		return nil, fmt.Errorf("gdbmcp: no binary for linux/%s (have %s; set %s to a static gdbmcp built for it)",
			arch, strings.Join(Arches(), ", "), EnvPath)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("gdbmcp: embedded binary for %s: %w", arch, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gdbmcp: embedded binary for %s: %w", arch, err)
	}
	cache.Store(arch, b)
	return b, nil
}

// Find returns the gdbmcp binary for linux/arch: the file at path when path is
// set, else the file named by SBX_GDBMCP_PATH when set, else the embedded one.
func Find(path, arch string) ([]byte, error) {
	if path == "" {
		path = os.Getenv(EnvPath)
	}
	if path == "" {
		return Embedded(arch)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gdbmcp: %w (from binary_path or %s)", err, EnvPath)
	}
	return b, nil
}
