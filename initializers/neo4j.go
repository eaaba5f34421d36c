package initializers

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// Neo4jType is the Neo4j 5 graph database.
const Neo4jType = "neo4j"

// Neo4j's ports inside the sandbox and its user.
const (
	Neo4jBoltPort = 7687
	Neo4jHTTPPort = 7474
	Neo4jUser     = "neo4j"
)

// DefaultNeo4jImage is the image of a neo4j entry without one.
const DefaultNeo4jImage = "neo4j:5"

// Neo4jConfig is [sandbox.sandboxes.neo4j.extra].
type Neo4jConfig struct {
	Common
	// Password of the neo4j user (NEO4J_AUTH=neo4j/PASSWORD); Neo4j 5
	// wants at least 8 characters. Default "sandboxkit".
	Password string `toml:"password"`
	// Plugins are Neo4j plugin names (NEO4J_PLUGINS), e.g. ["apoc"].
	Plugins []string `toml:"plugins"`
	// ImportDir is the import folder (server.directories.import), in the
	// shared volume so other sandboxes can drop files there. Default
	// /shared/neo4j/import.
	ImportDir string `toml:"import_dir"`
}

// Neo4jFactory is the neo4j initializer.
func Neo4jFactory() Factory {
	return Factory{
		NewConfig: func() any { return &Neo4jConfig{Password: "sandboxkit", ImportDir: "/shared/neo4j/import"} },
		New: func(cfg any) (Initializer, error) {
			c := cfg.(*Neo4jConfig)
			if len(c.Password) < 8 {
				return nil, invalidf("password: Neo4j 5 needs at least 8 characters, got %d", len(c.Password))
			}
			if c.ImportDir == "" || c.ImportDir[0] != '/' {
				return nil, invalidf("import_dir %q: want an absolute path inside the sandbox", c.ImportDir)
			}
			return &Neo4jInit{Config: *c}, nil
		},
	}
}

// Neo4jInit is the neo4j initializer for one entry.
type Neo4jInit struct {
	Generic
	Config Neo4jConfig
}

// Spec runs the image's entrypoint after creating the import folder, with
// the auth, plugins and import folder in its environment, and publishes
// Bolt and HTTP.
func (n *Neo4jInit) Spec() backend.Spec {
	env := map[string]string{
		"NEO4J_AUTH":                            Neo4jUser + "/" + n.Config.Password,
		"NEO4J_server_directories_import":       n.Config.ImportDir,
		"NEO4J_server_default__listen__address": "0.0.0.0",
	}
	if len(n.Config.Plugins) > 0 {
		b, _ := json.Marshal(n.Config.Plugins)
		env["NEO4J_PLUGINS"] = string(b)
	}
	return backend.Spec{
		Image: DefaultNeo4jImage,
		// The official image's entrypoint; the folder must exist first.
		Command: []string{"sh", "-c", `mkdir -p "$NEO4J_server_directories_import" && exec /startup/docker-entrypoint.sh neo4j`},
		Env:     env,
		Ports:   []backend.Port{{Port: Neo4jHTTPPort, Protocol: "tcp"}, {Port: Neo4jBoltPort, Protocol: "tcp"}},
	}
}

// Ready: the HTTP discovery document answers and a Bolt handshake
// succeeds.
func (n *Neo4jInit) Ready() wait.Strategy {
	timeout := max(time.Duration(n.Config.InitializerTimeout), 3*time.Minute)
	return wait.All(
		wait.ForHTTP(Neo4jHTTPPort, "/").WithBodyMatch(`bolt`).WithTimeout(timeout).WithPollInterval(time.Second),
		ForBoltHandshake(Neo4jBoltPort).WithTimeout(timeout).WithPollInterval(time.Second),
	).WithTimeout(timeout)
}

// Publish exports the Bolt address, user and password.
func (n *Neo4jInit) Publish(host string) map[string]string {
	return map[string]string{
		"NEO4J_URI":      "bolt://" + net.JoinHostPort(host, strconv.Itoa(Neo4jBoltPort)),
		"NEO4J_HOST":     host,
		"NEO4J_PORT":     strconv.Itoa(Neo4jBoltPort),
		"NEO4J_USER":     Neo4jUser,
		"NEO4J_PASSWORD": n.Config.Password,
	}
}

// Neo4j is the host program's handle on a neo4j sandbox.
type Neo4j struct {
	// BoltAddr and HTTPAddr are "host:port" the host program dials.
	BoltAddr, HTTPAddr string
	User, Password     string
}

// BoltURI is bolt://host:port for a Neo4j driver on the host.
func (n *Neo4j) BoltURI() string { return "bolt://" + n.BoltAddr }

// HTTPURL is the HTTP API's base URL.
func (n *Neo4j) HTTPURL() string { return "http://" + n.HTTPAddr }

// Handle returns a *Neo4j.
func (n *Neo4jInit) Handle(ctx context.Context, in *Instance) (any, error) {
	bolt, err := in.Endpoint(ctx, Neo4jBoltPort)
	if err != nil {
		return nil, err
	}
	http, err := in.Endpoint(ctx, Neo4jHTTPPort)
	if err != nil {
		return nil, err
	}
	return &Neo4j{BoltAddr: bolt, HTTPAddr: http, User: Neo4jUser, Password: n.Config.Password}, nil
}

// boltMagic opens every Bolt connection.
const boltMagic = 0x6060B017

// ForBoltHandshake is ready when a Bolt server on port agrees on a protocol
// version (Bolt 5.x, 4.4 or 4.x).
func ForBoltHandshake(port int) *wait.Poll {
	return wait.ForFunc("bolt handshake :"+strconv.Itoa(port), func(ctx context.Context, sb backend.Sandbox) error {
		ep, ok := backend.As[backend.Endpointer](sb)
		if !ok {
			return wait.Permanent(errUnsupportedEndpoint)
		}
		addr, err := ep.Endpoint(ctx, port)
		if err != nil {
			return err
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		return BoltHandshake(c)
	})
}

// BoltHandshake sends Bolt's magic and four version proposals on c and
// checks the server's choice.
func BoltHandshake(c io.ReadWriter) error {
	var req [20]byte
	binary.BigEndian.PutUint32(req[0:], boltMagic)
	// Each proposal: 0, range, minor, major (5.8 down to 5.0; 4.4 down to
	// 4.2; 4.1; 3.0).
	copy(req[4:], []byte{0, 8, 8, 5, 0, 2, 4, 4, 0, 0, 1, 4, 0, 0, 0, 3})
	if _, err := c.Write(req[:]); err != nil {
		return err
	}
	var resp [4]byte
	if _, err := io.ReadFull(c, resp[:]); err != nil {
		return fmt.Errorf("reading the Bolt version: %w", err)
	}
	if resp == [4]byte{} {
		return wait.Permanent(fmt.Errorf("the Bolt server supports none of the proposed versions"))
	}
	if string(resp[:]) == "HTTP" {
		return wait.Permanent(fmt.Errorf("an HTTP server answers on the Bolt port"))
	}
	return nil
}
