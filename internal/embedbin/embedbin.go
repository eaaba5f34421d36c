// Package embedbin holds what sbxdbin and gdbmcpbin share: static linux
// binaries of one of this module's commands, built for every architecture
// sandboxkit ships, gzipped, embedded by the package that owns them and
// found at run time without a Go toolchain.
//
// A Set finds a binary, first match wins: a path from the caller's config,
// the Set's environment variable, the embedded file. An embedded binary's
// identity (its SHA-256 and size) was recorded at build time in SUMS, so
// Lookup knows it without unpacking anything: a caller that has the binary
// cached already (a file named by its hash, a volume) never pays the
// ~50 ms of CPU that unpacking costs each process. Build (used by each
// package's gen.go through `go generate`) makes the embedded files
// reproducibly; CheckFresh (for each package's test) fails when they no
// longer match the command's source.
package embedbin

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Arches lists the architectures (GOARCH names) binaries are built for.
func Arches() []string { return []string{"amd64", "arm64"} }

// Set is one command's embedded binaries.
type Set struct {
	// Name is the command (cmd/NAME); its files are NAME-linux-ARCH.gz.
	Name string
	// EnvPath names the variable that overrides the embedded binary.
	EnvPath string
	// PathKey names the config key callers take a path from, for errors.
	PathKey string
	// Files holds the .gz files, SUMS and GOVERSION.
	Files embed.FS
}

// SumsFile names the file Build writes beside the binaries: one line per
// architecture, "SHA256 SIZE NAME", of the unpacked bytes.
const SumsFile = "SUMS"

// Binary is a found binary, its identity known before its bytes.
type Binary struct {
	// Sum is the hex SHA-256 of the bytes.
	Sum  string
	Size int64
	load func() ([]byte, error)
}

// Bytes returns the binary's bytes, unpacking an embedded one (once per
// process).
func (b Binary) Bytes() ([]byte, error) { return b.load() }

// Lookup finds the binary for linux/arch as Find does, returning its
// identity without reading it when it is the embedded one.
func (s *Set) Lookup(path, arch string) (Binary, error) {
	if path == "" {
		path = os.Getenv(s.EnvPath)
	}
	if path == "" {
		sum, size, err := s.embeddedSum(arch)
		if err != nil {
			return Binary{}, err
		}
		return Binary{Sum: sum, Size: size, load: func() ([]byte, error) { return s.Embedded(arch) }}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Binary{}, fmt.Errorf("%s: %w (from %s or %s)", s.Name, err, s.PathKey, s.EnvPath)
	}
	return binaryOf(b), nil
}

// binaryOf is b with its identity computed.
func binaryOf(b []byte) Binary {
	sum := sha256.Sum256(b)
	return Binary{Sum: hex.EncodeToString(sum[:]), Size: int64(len(b)), load: func() ([]byte, error) { return b, nil }}
}

// embeddedSum reads the recorded identity of the embedded binary for arch.
func (s *Set) embeddedSum(arch string) (string, int64, error) {
	data, err := s.Files.ReadFile(SumsFile)
	if err != nil {
		return "", 0, fmt.Errorf("%s: no %s embedded (run go generate ./internal/%sbin)", s.Name, SumsFile, s.Name)
	}
	name := strings.TrimSuffix(s.FileName(arch), ".gz")
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[2] != name {
			continue
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || len(f[0]) != 2*sha256.Size {
			return "", 0, fmt.Errorf("%s: malformed line in the embedded %s: %q", s.Name, SumsFile, sc.Text())
		}
		return f[0], size, nil
	}
	return "", 0, fmt.Errorf("%s: no binary for linux/%s (have %s; set %s to a static %s built for it)",
		s.Name, arch, strings.Join(Arches(), ", "), s.EnvPath, s.Name)
}

// cache holds unpacked binaries by Set name and arch.
var cache sync.Map

// GoVersion is the Go release the embedded binaries were built with.
func (s *Set) GoVersion() string {
	v, _ := s.Files.ReadFile("GOVERSION")
	return strings.TrimSpace(string(v))
}

// FileName is the embedded file of arch.
func (s *Set) FileName(arch string) string { return s.Name + "-linux-" + arch + ".gz" }

// Embedded returns the embedded binary for linux/arch (a GOARCH name).
func (s *Set) Embedded(arch string) ([]byte, error) {
	key := s.Name + "/" + arch
	if b, ok := cache.Load(key); ok {
		return b.([]byte), nil
	}
	gz, err := s.Files.ReadFile(s.FileName(arch))
	if err != nil {
		return nil, fmt.Errorf("%s: no binary for linux/%s (have %s; set %s to a static %s built for it)",
			s.Name, arch, strings.Join(Arches(), ", "), s.EnvPath, s.Name)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("%s: embedded binary for %s: %w", s.Name, arch, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: embedded binary for %s: %w", s.Name, arch, err)
	}
	cache.Store(key, b)
	return b, nil
}

// Find returns the binary for linux/arch: the file at path when path is set,
// else the file named by the Set's variable when set, else the embedded one.
func (s *Set) Find(path, arch string) ([]byte, error) {
	if path == "" {
		path = os.Getenv(s.EnvPath)
	}
	if path == "" {
		return s.Embedded(arch)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (from %s or %s)", s.Name, err, s.PathKey, s.EnvPath)
	}
	return b, nil
}

// Build builds cmd/name of this module for every architecture in Arches
// and writes name-linux-ARCH.gz and GOVERSION into out. The build is
// reproducible: same source and same Go release give the same bytes
// (-trimpath, no build ID, no VCS stamp, pinned GOAMD64/GOARM64).
func Build(name, out string) error {
	tmp, err := os.MkdirTemp("", name+"-build-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var sums strings.Builder
	for _, arch := range Arches() {
		bin := filepath.Join(tmp, name+"-"+arch)
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
			"-ldflags=-s -w -buildid=", "-o", bin, "github.com/sandboxkit/sandboxkit/cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
			"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=", "GOEXPERIMENT=")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s for linux/%s: %w", name, arch, err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		id := binaryOf(data)
		fmt.Fprintf(&sums, "%s %d %s-linux-%s\n", id.Sum, id.Size, name, arch)
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(data)
		if err := zw.Close(); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, name+"-linux-"+arch+".gz"), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(out, SumsFile), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	// The Go release decides the bytes; record it so a test on another
	// release can tell staleness from a different compiler.
	version := strings.TrimSpace(runtime.Version())
	if v, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		version = strings.TrimSpace(string(v))
	}
	return os.WriteFile(filepath.Join(out, "GOVERSION"), []byte(version+"\n"), 0o644)
}
