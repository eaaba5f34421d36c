package config

import (
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// ServeConfig is [sandbox.serve]: settings of `sbx serve` and `sbx mcp`, the
// server that gives agents sandboxes over MCP and HTTP (package server).
// Zero values mean the defaults below; the server applies them.
type ServeConfig struct {
	// Listen is the HTTP address of sbx serve. Default "127.0.0.1:8765".
	Listen string `toml:"listen"`
	// APIKey is the key callers must send (Authorization: Bearer KEY).
	// $SBX_API_KEY wins over it. Without a key the server listens only on
	// loopback, unless started with --insecure.
	APIKey string `toml:"api_key"`
	// AdminKey opens the operator's endpoints (/admin/...: a sandbox's
	// egress policy) to whoever sends it; agents, who hold the API key,
	// cannot change what their sandboxes may reach. $SBX_ADMIN_KEY wins
	// over it. Without one those endpoints are closed.
	AdminKey string `toml:"admin_key"`
	// IdleTTL is how long a sandbox lives without tool calls, unless
	// create_sandbox asks for another timeout. Default 30m.
	IdleTTL time.Duration `toml:"idle_ttl"`
	// MaxLifetime is the hard limit on a sandbox's life, however busy it
	// is; it is also the backend TTL, so sbx gc reaps sandboxes a dead
	// server left. Default 24h.
	MaxLifetime time.Duration `toml:"max_lifetime"`
	// OutputLimit caps the bytes of output one execute or job_output call
	// returns (the middle of longer output is cut and marked). Default
	// 256 KiB.
	OutputLimit ByteSize `toml:"output_limit"`
	// DeleteOnShutdown removes every sandbox the server knows when it
	// stops. Default false: sandboxes are kept and resumable.
	DeleteOnShutdown bool `toml:"delete_on_shutdown"`
	// Instance names the server in its sandboxes' labels: a server adopts
	// the sandboxes of its own instance at start and leaves others alone,
	// so two servers on one backend need different names. Default
	// "serve".
	Instance string `toml:"instance"`
	// AgentEgress lets a create through the OpenSandbox API carry a
	// networkPolicy, which becomes the sandbox's egress policy (within
	// AgentEgressLimit). Default true; false refuses such creates.
	AgentEgress *bool `toml:"agent_egress"`
	// AgentEgressLimit bounds the policies agents set (at create and
	// through the egress API): its deny rules are added to every such
	// policy, and with default = "deny" an agent may allow only the
	// targets it allows. Absent: no bound.
	AgentEgressLimit *EgressConfig `toml:"agent_egress_limit"`
	// AllowedHostPaths are the host folders under which a create through
	// the OpenSandbox API may mount host paths (its volumes' host.path),
	// as the real server's allowed_host_paths. Empty: none.
	AllowedHostPaths []string `toml:"allowed_host_paths"`
	// AuditFile is where the audit trail goes, one JSON line per tool
	// call, terminal, OpenSandbox API change and admin action (relative
	// to the config file's folder). Absent: the latest entries are kept
	// in memory only. GET /admin/audit reads them either way.
	AuditFile string `toml:"audit_file"`
	// AuditMaxSize rotates the audit file once it reaches this size
	// (default 64 MiB) into audit_file.1 ... audit_file.N.
	AuditMaxSize ByteSize `toml:"audit_max_size"`
	// AuditKeep is how many rotated files are kept (default 5; -1: none).
	AuditKeep int `toml:"audit_keep"`
}

// ParseVolumeSpec parses one "host:sandbox[:ro|rw]" volume spec as the
// config's volumes and mount_host_paths do: "~" is expanded and a relative
// host path resolves against dir. A host path that does not exist is no
// error: skip says why the volume is left out.
func ParseVolumeSpec(spec, dir string) (v backend.Volume, skip string, err error) {
	return parseVolume(spec, dir)
}
