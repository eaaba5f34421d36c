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
	"embed"

	"github.com/sandboxkit/sandboxkit/internal/embedbin"
)

//go:generate go run gen.go -o .

// EnvPath overrides the embedded binary with a file.
const EnvPath = "SBX_GDBMCP_PATH"

//go:embed gdbmcp-linux-amd64.gz gdbmcp-linux-arm64.gz SUMS GOVERSION
var files embed.FS

// Set is the embedded gdbmcp binaries. (A function, not a variable: a
// variable would keep the embedded files in every binary importing this
// package, sbxd itself included, which could then never be rebuilt to the
// same bytes.)
func Set() *embedbin.Set {
	return &embedbin.Set{Name: "gdbmcp", EnvPath: EnvPath, PathKey: "binary_path", Files: files}
}

// Arches lists the architectures (GOARCH names) with an embedded binary.
func Arches() []string { return embedbin.Arches() }

// GoVersion is the Go release the embedded binaries were built with.
func GoVersion() string { return Set().GoVersion() }

// Lookup finds the binary as Find does, with its identity known without
// unpacking it when it is the embedded one (recorded at build time).
func Lookup(path, arch string) (embedbin.Binary, error) { return Set().Lookup(path, arch) }

// Embedded returns the embedded binary for linux/arch (a GOARCH name).
func Embedded(arch string) ([]byte, error) { return Set().Embedded(arch) }

// Find returns the gdbmcp binary for linux/arch: the file at path when path
// is set, else the file named by SBX_GDBMCP_PATH when set, else the embedded one.
func Find(path, arch string) ([]byte, error) { return Set().Find(path, arch) }
