package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/egresstest"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
)

// sbx secret rotate on native: a sandbox whose entry declares credentials
// has them read again and handed to its enforcer; one whose entry declares
// none is refused saying so, as is a source that fails (naming it, never a value).
func TestSecretRotate(t *testing.T) {
	setup(t)
	dockertest.RequireImage(t, dockertest.Client(t), dockertest.BusyboxImage)
	fn := fakenet.Start(t)
	egresstest.TrustFakenet(t, fn)
	t.Setenv("SBX_TEST_BROKERED", "first-value")
	pruneAtCleanup(t)
	t.Setenv("SBX_CONFIG", writeConfig(t, fmt.Sprintf(`[sandbox]
backend = "native"
[sandbox.native]
egress_dns = %q
[sandbox.sandboxes.main]
image = %q
egress = { default = "deny", allow = ["allowed.test"] }
[sandbox.sandboxes.main.credentials.api]
hosts = ["allowed.test"]
header = "X-Api-Key"
env = "API_KEY"
from_env = "SBX_TEST_BROKERED"
[sandbox.sandboxes.plain]
image = %q
`, fn.DNS.String(), dockertest.BusyboxImage, dockertest.BusyboxImage)))
	id := keep(t, "true")
	t.Cleanup(func() { sbx(t, "rm", id) })
	if got := must(t, "exec", id, "--", "sh", "-c", "echo $API_KEY"); !strings.HasPrefix(got, "sbx-placeholder-api-") {
		t.Fatalf("API_KEY in the sandbox: %q", got)
	}
	ls := must(t, "secret", "ls", id)
	for _, want := range []string{"NAME", "api", "allowed.test", "header X-Api-Key", "API_KEY"} {
		if !strings.Contains(ls, want) {
			t.Errorf("sbx secret ls lacks %q:\n%s", want, ls)
		}
	}
	if strings.Contains(ls, "first-value") {
		t.Errorf("sbx secret ls shows the value:\n%s", ls)
	}
	if got := must(t, "--json", "secret", "ls", "--entry", "plain", id); !strings.Contains(strings.Join(strings.Fields(got), ""), `"credentials":[]`) {
		t.Errorf("sbx --json secret ls of an entry without credentials: %s", got)
	}
	t.Setenv("SBX_TEST_BROKERED", "second-value")
	if got := must(t, "secret", "rotate", id); got != "rotated api of sandbox "+id+"\n" {
		t.Errorf("sbx secret rotate: %q", got)
	}
	r := sbx(t, "secret", "rotate", "--entry", "plain", id)
	if r.code == 0 || !strings.Contains(r.stderr, `entry "plain" declares no credentials`) {
		t.Errorf("rotate with an entry without credentials: exit %d, %q", r.code, r.stderr)
	}
	t.Setenv("SBX_TEST_BROKERED", "")
	os.Unsetenv("SBX_TEST_BROKERED")
	r = sbx(t, "secret", "rotate", id)
	if r.code == 0 || !strings.Contains(r.stderr, "credential api: $SBX_TEST_BROKERED is not set") || strings.Contains(r.stderr, "second-value") {
		t.Errorf("rotate with the source gone: exit %d, %q", r.code, r.stderr)
	}
}
