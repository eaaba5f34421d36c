package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
)

// sbx egress show and set on a lite sandbox made from an entry with a
// policy: the policy as configured, a denial the sandbox caused, a change
// that applies at once, and bad input refused naming the rule.
func TestEgressCommands(t *testing.T) {
	setup(t)
	fn := fakenet.Start(t)
	t.Setenv("SBX_CONFIG", liteConfig(t, fmt.Sprintf("egress_dns = %q", fn.DNS.String()),
		`egress = { default = "deny", allow = ["allowed.test:80"] }`))
	id := keep(t, "true")
	t.Cleanup(func() { sbx(t, "rm", id) })

	// busybox's nslookup asks the sandbox's resolver, the enforcer.
	sbx(t, "exec", id, "--", "nslookup", "denied.test")
	out := must(t, "egress", "show", id)
	for _, want := range []string{"default: deny", "allow:   allowed.test:80", "dns", "denied.test"} {
		if !strings.Contains(out, want) {
			t.Errorf("sbx egress show lacks %q:\n%s", want, out)
		}
	}

	must(t, "egress", "set", id, "--allow", "www.allowed.test:80", "--deny", "denied.test")
	var st backend.EgressStatus
	if err := json.Unmarshal([]byte(must(t, "--json", "egress", "show", id)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Policy.Default != "deny" || strings.Join(st.Policy.Allow, ",") != "www.allowed.test:80" || strings.Join(st.Policy.Deny, ",") != "denied.test" {
		t.Errorf("policy after set: %+v", st.Policy)
	}
	if got := must(t, "exec", id, "--", "wget", "-q", "-O", "-", "http://www.allowed.test/"); got != "hello from www.allowed.test\n" {
		t.Errorf("www.allowed.test after it was allowed: %q", got)
	}
	if r := sbx(t, "exec", id, "--", "wget", "-q", "-O", "-", "http://allowed.test/"); r.code == 0 {
		t.Errorf("allowed.test is still reachable after the set dropped it: %q", r.stdout)
	}

	r := sbx(t, "egress", "set", id, "--allow", "x.*.test")
	if r.code == 0 || !strings.Contains(r.stderr, "x.*.test") {
		t.Errorf("a bad rule: exit %d, stderr %q", r.code, r.stderr)
	}
	r = sbx(t, "egress", "set", id, "--default", "maybe")
	if r.code == 0 || !strings.Contains(r.stderr, "--default") {
		t.Errorf("a bad default: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(must(t, "--json", "egress", "show", id)), &st); err != nil {
		t.Fatal(err)
	}
	if strings.Join(st.Policy.Allow, ",") != "www.allowed.test:80" {
		t.Errorf("a refused set changed the policy: %+v", st.Policy)
	}
}
