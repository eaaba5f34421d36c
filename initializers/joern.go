package initializers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// JoernType is the Joern code property graph server.
const JoernType = "joern"

// DefaultJoernImage is the image of a joern entry without one.
const DefaultJoernImage = "ghcr.io/joernio/joern:nightly"

// JoernConfig is [sandbox.sandboxes.joern.extra].
type JoernConfig struct {
	Common
	// Port the server listens on inside the sandbox. Default 8081.
	Port int `toml:"port"`
	// ParseCode imports CodeDir into a CPG once the server is up.
	ParseCode bool `toml:"parse_code"`
	// CodeDir is the code to parse. Default /shared/code.
	CodeDir string `toml:"code_dir"`
	// ProjectName names the CPG's project. Default "shared".
	ProjectName string `toml:"project_name"`
}

// JoernFactory is the joern initializer.
func JoernFactory() Factory {
	return Factory{
		NewConfig: func() any { return &JoernConfig{Port: 8081, CodeDir: "/shared/code", ProjectName: "shared"} },
		New: func(cfg any) (Initializer, error) {
			c := cfg.(*JoernConfig)
			if c.Port < 1 || c.Port > 65535 {
				return nil, invalidf("port %d: want 1-65535", c.Port)
			}
			if c.ParseCode && (c.CodeDir == "" || c.CodeDir[0] != '/') {
				return nil, invalidf("code_dir %q: want an absolute path inside the sandbox", c.CodeDir)
			}
			return &JoernInit{Config: *c}, nil
		},
	}
}

// JoernInit is the joern initializer for one entry.
type JoernInit struct {
	Generic
	Config JoernConfig
}

// Spec runs the Joern server on all addresses and publishes its port.
func (j *JoernInit) Spec() backend.Spec {
	return backend.Spec{
		Image:   DefaultJoernImage,
		Command: []string{"joern", "--server", "--server-host", "0.0.0.0", "--server-port", strconv.Itoa(j.Config.Port)},
		Ports:   []backend.Port{{Port: j.Config.Port, Protocol: "tcp"}},
	}
}

// DependsOn: the workspace (whose code it parses) and, when the session
// has one, the graph database.
func (j *JoernInit) DependsOn() []Dependency {
	return []Dependency{{Name: MainType}, {Name: Neo4jType, Optional: true}}
}

func (j *JoernInit) timeout() time.Duration {
	return max(time.Duration(j.Config.InitializerTimeout), 5*time.Minute)
}

// Ready: a query through the HTTP API answers.
func (j *JoernInit) Ready() wait.Strategy {
	return wait.ForHTTP(j.Config.Port, "/query-sync").
		WithMethod(http.MethodPost, `{"query":"1 + 1"}`).
		WithBodyMatch(`"success"\s*:\s*true`).
		WithTimeout(j.timeout()).WithPollInterval(time.Second)
}

// Provision imports CodeDir into a CPG when ParseCode is set, once the
// server answers.
func (j *JoernInit) Provision(ctx context.Context, in *Instance) error {
	if !j.Config.ParseCode {
		return nil
	}
	in.Status("waiting for the server to import " + j.Config.CodeDir)
	if err := j.Ready().WaitUntilReady(ctx, in.Sandbox); err != nil {
		return err
	}
	addr, err := in.Endpoint(ctx, j.Config.Port)
	if err != nil {
		return err
	}
	in.Status("importCode " + j.Config.CodeDir)
	q := fmt.Sprintf("importCode(inputPath=%s, projectName=%s)", strconv.Quote(j.Config.CodeDir), strconv.Quote(j.Config.ProjectName))
	out, err := JoernQuery(ctx, "http://"+addr, q)
	if err != nil {
		return fmt.Errorf("parsing %s into a CPG: %w", j.Config.CodeDir, err)
	}
	in.Logger.Debug("joern importCode", "stdout", out)
	return nil
}

// Publish exports the server's address.
func (j *JoernInit) Publish(host string) map[string]string {
	return map[string]string{
		"JOERN_SERVER_HOST": host,
		"JOERN_SERVER_PORT": strconv.Itoa(j.Config.Port),
	}
}

// Joern is the host program's handle on a joern sandbox.
type Joern struct {
	// Addr is "host:port" of the server's HTTP API.
	Addr string
}

// URL is the server's base URL.
func (j *Joern) URL() string { return "http://" + j.Addr }

// Query runs one query synchronously and returns its stdout.
func (j *Joern) Query(ctx context.Context, q string) (string, error) {
	return JoernQuery(ctx, j.URL(), q)
}

// Handle returns a *Joern.
func (j *JoernInit) Handle(ctx context.Context, in *Instance) (any, error) {
	addr, err := in.Endpoint(ctx, j.Config.Port)
	if err != nil {
		return nil, err
	}
	return &Joern{Addr: addr}, nil
}

// JoernQuery posts q to a Joern server's /query-sync and returns the
// query's stdout; a query that fails is an error holding its output.
func JoernQuery(ctx context.Context, baseURL, q string) (string, error) {
	body, _ := json.Marshal(map[string]string{"query": q})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(baseURL, "/")+"/query-sync", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("joern query: status %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var r struct {
		Success bool   `json:"success"`
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return "", fmt.Errorf("joern query: %w", err)
	}
	if !r.Success {
		return r.Stdout, fmt.Errorf("joern query %q failed: %s", q, strings.TrimSpace(r.Stdout+r.Stderr))
	}
	return r.Stdout, nil
}
