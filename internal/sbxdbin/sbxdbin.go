// Package sbxdbin holds prebuilt sbxd binaries (cmd/sbxd) for linux/amd64
// and linux/arm64, so a program that embeds sandboxkit can inject sbxd into
// sandboxes without a Go toolchain at run time.
//
// How a backend finds the binary, first match wins:
//
//  1. a path set in the backend's config (native: sbxd_path in
//     [sandbox.native]);
//  2. the environment variable SBX_SBXD_PATH, a path to a static linux
//     binary for the sandbox's architecture (for developing sbxd itself);
//  3. the binary embedded here for the sandbox's architecture.
//
// The embedded files are made by `go generate ./internal/sbxdbin`
// (gen.go) and committed; a test rebuilds them and fails when they differ.
package sbxdbin

import (
	"embed"
	"strings"

	"github.com/sandboxkit/sandboxkit/internal/embedbin"
)

//go:generate go run gen.go -o .

// EnvPath overrides the embedded binary with a file.
const EnvPath = "SBX_SBXD_PATH"

//go:embed sbxd-linux-amd64.gz sbxd-linux-arm64.gz SUMS GOVERSION
var files embed.FS

// Set is the embedded sbxd binaries. (A function, not a variable: a
// variable would keep the embedded files in every binary importing this
// package, whether it uses them or not. The agent itself was one, through
// package sbxd's client, and could then never have been rebuilt to the
// same bytes; it no longer imports this package or sbxd: see
// TestAgentLinksNoBackend.)
func Set() *embedbin.Set {
	return &embedbin.Set{Name: "sbxd", EnvPath: EnvPath, PathKey: "sbxd_path", Files: files}
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

// Find returns the sbxd binary for linux/arch: the file at path when path
// is set, else the file named by SBX_SBXD_PATH when set, else the embedded one.
func Find(path, arch string) ([]byte, error) { return Set().Find(path, arch) }

// NormalizeArch turns an engine's architecture name (uname -m style, such
// as "x86_64" or "aarch64") into a GOARCH name.
func NormalizeArch(arch string) string {
	switch strings.ToLower(arch) {
	case "x86_64", "x86-64", "amd64":
		return "amd64"
	case "aarch64", "arm64", "armv8", "arm64/v8":
		return "arm64"
	}
	return arch
}
