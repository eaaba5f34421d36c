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
const EnvPath = "SBX_SBXD_PATH"

//go:embed sbxd-linux-amd64.gz sbxd-linux-arm64.gz GOVERSION
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
	gz, err := files.ReadFile("sbxd-linux-" + arch + ".gz")
	if err != nil {
		return nil, fmt.Errorf("sbxd: no binary for linux/%s (have %s; set %s to a static sbxd built for it)",
			arch, strings.Join(Arches(), ", "), EnvPath)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("sbxd: embedded binary for %s: %w", arch, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("sbxd: embedded binary for %s: %w", arch, err)
	}
	cache.Store(arch, b)
	return b, nil
}

// Find returns the sbxd binary for linux/arch: the file at path when path is
// set, else the file named by SBX_SBXD_PATH when set, else the embedded one.
func Find(path, arch string) ([]byte, error) {
	if path == "" {
		path = os.Getenv(EnvPath)
	}
	if path == "" {
		return Embedded(arch)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sbxd: %w (from sbxd_path or %s)", err, EnvPath)
	}
	return b, nil
}

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
