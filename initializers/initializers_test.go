package initializers_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers"
)

func TestRegistry(t *testing.T) {
	r := initializers.Default()
	if got := strings.Join(r.Names(), ","); got != "codeql,coverage,fuzz,gdb_mcp,generic,joern,main,neo4j" {
		t.Errorf("builtins: %s", got)
	}
	if _, fallback, err := r.Lookup("pdb_mcp"); err != nil || !fallback {
		t.Errorf("an entry name without an initializer gets the generic one: fallback %v, %v", fallback, err)
	}
	empty := initializers.NewRegistry()
	if _, _, err := empty.Lookup("x"); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Errorf("empty registry: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a type twice: want a panic")
		}
	}()
	r2 := initializers.NewRegistry()
	initializers.Builtins(r2)
	r2.Register("main", initializers.MainFactory())
}

// newFrom runs a factory on its default config after mutate.
func newFrom[C any](t *testing.T, f initializers.Factory, mutate func(*C)) (initializers.Initializer, error) {
	t.Helper()
	cfg := f.NewConfig().(*C)
	mutate(cfg)
	return f.New(cfg)
}

func TestNeo4jSpecAndPublish(t *testing.T) {
	in, err := newFrom(t, initializers.Neo4jFactory(), func(c *initializers.Neo4jConfig) {
		c.Password = "correct-horse"
		c.Plugins = []string{"apoc", "graph-data-science"}
	})
	if err != nil {
		t.Fatal(err)
	}
	spec := in.Spec()
	if spec.Image != initializers.DefaultNeo4jImage || spec.Env["NEO4J_AUTH"] != "neo4j/correct-horse" ||
		spec.Env["NEO4J_PLUGINS"] != `["apoc","graph-data-science"]` || spec.Env["NEO4J_server_directories_import"] != "/shared/neo4j/import" {
		t.Errorf("spec: %+v", spec)
	}
	if len(spec.Ports) != 2 {
		t.Errorf("ports: %+v", spec.Ports)
	}
	env := in.Publish("neo4j")
	if env["NEO4J_URI"] != "bolt://neo4j:7687" || env["NEO4J_PASSWORD"] != "correct-horse" || env["NEO4J_USER"] != "neo4j" {
		t.Errorf("publish: %v", env)
	}
	if _, err := newFrom(t, initializers.Neo4jFactory(), func(c *initializers.Neo4jConfig) { c.Password = "short" }); err == nil ||
		!strings.Contains(err.Error(), "password") {
		t.Errorf("short password: %v", err)
	}
}

func TestJoernSpecAndDeps(t *testing.T) {
	in, err := newFrom(t, initializers.JoernFactory(), func(c *initializers.JoernConfig) { c.Port = 9000 })
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(in.Spec().Command, " "); got != "joern --server --server-host 0.0.0.0 --server-port 9000" {
		t.Errorf("command: %s", got)
	}
	deps := in.DependsOn()
	if len(deps) != 2 || deps[0] != (initializers.Dependency{Name: "main"}) || !deps[1].Optional || deps[1].Name != "neo4j" {
		t.Errorf("deps: %+v", deps)
	}
	if env := in.Publish("joern"); env["JOERN_SERVER_HOST"] != "joern" || env["JOERN_SERVER_PORT"] != "9000" {
		t.Errorf("publish: %v", env)
	}
	if _, err := newFrom(t, initializers.JoernFactory(), func(c *initializers.JoernConfig) { c.Port = 0 }); err == nil {
		t.Error("port 0: want an error")
	}
}

// execSandbox is an in-process stand-in sandbox that answers Exec from a
// function and keeps written files in memory.
type execSandbox struct {
	backend.Sandbox
	run   func(argv []string) backend.ExecResult
	mu    sync.Mutex
	files map[string][]byte
	argvs [][]string
}

func (s *execSandbox) ID() string { return "fake" }
func (s *execSandbox) Exec(_ context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	s.mu.Lock()
	s.argvs = append(s.argvs, req.Cmd)
	s.mu.Unlock()
	return s.run(req.Cmd), nil
}
func (s *execSandbox) ReadFile(_ context.Context, name string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}
func (s *execSandbox) WriteFile(_ context.Context, name string, r io.Reader, _ fs.FileMode) error {
	b, err := io.ReadAll(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		s.files = map[string][]byte{}
	}
	s.files[name] = b
	return err
}
func (s *execSandbox) Stat(context.Context, string) (fs.FileInfo, error) { return nil, fs.ErrNotExist }
func (s *execSandbox) ReadDir(context.Context, string) ([]fs.FileInfo, error) {
	return nil, fs.ErrNotExist
}

func instance(sb backend.Sandbox) *initializers.Instance {
	return &initializers.Instance{Name: "main", Sandbox: sb, Logger: slog.New(slog.DiscardHandler), Status: func(string) {}}
}

func TestMainInstallsPackagesOnce(t *testing.T) {
	in, err := newFrom(t, initializers.MainFactory(), func(c *initializers.MainConfig) {
		c.Packages = []string{"requests", "numpy"}
		c.PipArgs = []string{"--index-url", "http://mirror/simple"}
	})
	if err != nil {
		t.Fatal(err)
	}
	sb := &execSandbox{run: func([]string) backend.ExecResult { return backend.ExecResult{} }}
	ctx := context.Background()
	if err := in.Provision(ctx, instance(sb)); err != nil {
		t.Fatal(err)
	}
	if len(sb.argvs) != 1 || strings.Join(sb.argvs[0], " ") !=
		"python3 -m pip install --no-input --disable-pip-version-check --index-url http://mirror/simple requests numpy" {
		t.Errorf("pip: %q", sb.argvs)
	}
	// Started again (from a checkpoint): nothing to install.
	if err := in.Provision(ctx, instance(sb)); err != nil || len(sb.argvs) != 1 {
		t.Errorf("second provision: %v, %d execs", err, len(sb.argvs))
	}
	failing := &execSandbox{run: func([]string) backend.ExecResult {
		return backend.ExecResult{ExitCode: 1, Stderr: []byte("ERROR: No matching distribution found for numpy\n")}
	}}
	err = in.Provision(ctx, instance(failing))
	if err == nil || !strings.Contains(err.Error(), "No matching distribution") || !strings.Contains(err.Error(), "exit code 1") {
		t.Errorf("failing pip: want pip's output, got %v", err)
	}
	if _, err := newFrom(t, initializers.MainFactory(), func(c *initializers.MainConfig) { c.Packages = []string{"--pre"} }); err == nil ||
		!strings.Contains(err.Error(), "pip_args") {
		t.Errorf("an option in packages: %v", err)
	}
}

func TestGDBMCPWithoutGDB(t *testing.T) {
	in, err := initializers.GDBMCPFactory().New(initializers.GDBMCPFactory().NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	sb := &execSandbox{run: func(argv []string) backend.ExecResult {
		return backend.ExecResult{ExitCode: 127, Stderr: []byte("exec: gdb: not found")}
	}}
	err = in.Provision(context.Background(), instance(sb))
	if err == nil || !strings.Contains(err.Error(), "use an image with gdb installed") {
		t.Errorf("want a clear error about gdb, got %v", err)
	}
	if env := in.Publish("gdb_mcp"); env["GDB_MCP_SSE_URL"] != "http://gdb_mcp:1111/sse" {
		t.Errorf("GDB_MCP_SSE_URL = %q", env["GDB_MCP_SSE_URL"])
	}
	if env := in.Publish("gdb_mcp"); env["GDB_MCP_URL"] != "http://gdb_mcp:1111/mcp" {
		t.Errorf("publish: %v", env)
	}
}

// TestBoltHandshake talks to an in-process stand-in Bolt server.
func TestBoltHandshake(t *testing.T) {
	for name, reply := range map[string][]byte{"accepted": {0, 0, 8, 5}, "refused": {0, 0, 0, 0}} {
		t.Run(name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			go func() {
				defer server.Close()
				var req [20]byte
				if _, err := io.ReadFull(server, req[:]); err != nil || !bytes.Equal(req[:4], []byte{0x60, 0x60, 0xB0, 0x17}) {
					return
				}
				server.Write(reply)
			}()
			err := initializers.BoltHandshake(client)
			if (err == nil) != (name == "accepted") {
				t.Errorf("handshake: %v", err)
			}
		})
	}
}
