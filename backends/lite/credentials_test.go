package lite

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/egresstest"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
)

const brokeredValue = "the-real-value-3f9c"

// A credential declared on the spec reaches allowed.test over HTTPS that
// the sandbox verifies against the bundle it was given (its own CA), in
// place of the placeholder it holds or added where it sends none; plain
// HTTP gets nothing; and the value is nowhere the sandbox can look, nor in
// the sandbox's record.
func TestEgressCredentials(t *testing.T) {
	e := newTestEnv(t)
	fn := fakenet.Start(t)
	// The enforcer verifies the fake internet's servers with the host's
	// trust store: here, the fake internet's CA.
	egresstest.TrustFakenet(t, fn)
	t.Setenv("SBX_TEST_BROKERED", brokeredValue)

	e.cfg.EgressDNS = fn.DNS.String()
	b := e.open(t)
	spec := e.spec("credentials")
	spec.Egress = &backend.Egress{Default: "deny", Allow: []string{"allowed.test"}}
	spec.Credentials = []backend.Credential{{Name: "api", Hosts: []string{"allowed.test"}, Header: "X-Api-Key", Env: "API_KEY",
		From: backend.CredentialSource{Env: "SBX_TEST_BROKERED"}}}
	sb := create(t, b, spec)
	env := egresstest.NewEnv(t, fn, b, sb)

	env.MustBroker(t, brokeredValue, "X-Api-Key", "$API_KEY")
	env.MustBroker(t, brokeredValue)
	env.MustReach(t, "header", "get", "http://allowed.test/header?name=X-Api-Key")

	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: `echo "$API_KEY"; env; cat /etc/sandboxkit/* /proc/self/environ; grep -rl ` + brokeredValue + ` /etc /root /tmp /home 2>/dev/null; true`})
	require.NoError(t, err)
	out := string(res.Stdout) + string(res.Stderr)
	require.NotContains(t, out, brokeredValue, "the sandbox can see the value")
	require.True(t, strings.HasPrefix(out, "sbx-placeholder-api-"), "API_KEY is not a placeholder: %.80q", out)
	require.Contains(t, out, "SSL_CERT_FILE=/etc/sandboxkit/ca-bundle.pem")
	require.Contains(t, out, "BEGIN CERTIFICATE")

	record, err := os.ReadFile(filepath.Join(sb.dir, "meta.json"))
	require.NoError(t, err)
	require.NotContains(t, string(record), brokeredValue)
	fi, err := os.Stat(credentialsFile(sb.dir))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	env.MustRecordBrokered(t, "api", brokeredValue)
	placeholder := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	if !b.runtime.gvisor() {
		// Under gVisor the sandbox's memory is its sentry's: no host
		// process of the cgroup is the sandbox's own.
		egresstest.MustKeepOutOfMemory(t, sb, brokeredValue, placeholder)
	}
	// Rotation: over the enforcer's control socket (it gave up root), and
	// into the file its restarts read.
	egresstest.RotateAndSee(t, b, sb, spec.Credentials, env, "lite-rotated-value-3c1d", 10*time.Second)
	data, err := os.ReadFile(credentialsFile(sb.dir))
	require.NoError(t, err)
	require.Contains(t, string(data), "lite-rotated-value-3c1d")

	// A bundle or a move carries the sandbox's snapshot: neither value nor
	// the CA's key is in it, and the sandbox made from it on the other side
	// gets its own placeholder and CA and the value from its source again.
	var file struct {
		CAKey string `json:"ca_key"`
	}
	require.NoError(t, json.Unmarshal(data, &file))
	require.Contains(t, file.CAKey, "PRIVATE KEY")
	env.MustRestoreWithoutSecrets(t, b, spec, "lite-rotated-value-3c1d", brokeredValue, strings.Split(file.CAKey, "\n")[1])

	// Forks: each on a network of its own with the parent's policy, a CA
	// and placeholders of its own, and the value applied by its own
	// enforcer, whose file (a key of its own) stays in its host folder.
	for _, fe := range env.MustForkWithOwnCredentials(t, 2, "lite-rotated-value-3c1d") {
		fdir := filepath.Join(b.dir, fe.Sandbox.ID())
		fdata, err := os.ReadFile(credentialsFile(fdir))
		require.NoError(t, err)
		var ffile struct {
			CAKey string `json:"ca_key"`
		}
		require.NoError(t, json.Unmarshal(fdata, &ffile))
		require.NotEqual(t, file.CAKey, ffile.CAKey, "a fork has its parent's CA key")
		record, err := os.ReadFile(filepath.Join(fdir, "meta.json"))
		require.NoError(t, err)
		require.NotContains(t, string(record), "lite-rotated-value-3c1d")
		if !b.runtime.gvisor() {
			egresstest.MustKeepOutOfMemory(t, fe.Sandbox, "lite-rotated-value-3c1d", "sbx-placeholder-")
		}
	}
}
