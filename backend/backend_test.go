package backend

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCapture(t *testing.T) {
	c := NewCapture(5)
	for _, s := range []string{"ab", "cd", "efgh", "ij"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v: a capture must drain everything", s, n, err)
		}
	}
	if got := string(c.Bytes()); got != "abcde" || !c.Truncated() {
		t.Errorf("kept %q truncated=%v, want %q true", got, c.Truncated(), "abcde")
	}
	exact := NewCapture(3)
	exact.Write([]byte("abc"))
	if exact.Truncated() {
		t.Error("output of exactly the limit is not truncated")
	}
	all := NewCapture(-1)
	all.Write([]byte(strings.Repeat("x", 10<<10)))
	if len(all.Bytes()) != 10<<10 || all.Truncated() {
		t.Error("a negative limit keeps everything")
	}
}

func TestOutputs(t *testing.T) {
	var sb strings.Builder
	o := NewOutputs(ExecRequest{Stdout: &sb, OutputLimit: 2})
	o.Stdout.Write([]byte("streamed"))
	o.Stderr.Write([]byte("err"))
	var res ExecResult
	o.Finish(&res)
	if sb.String() != "streamed" || res.Stdout != nil {
		t.Errorf("stdout writer got %q, result %q: a caller's writer is not captured", sb.String(), res.Stdout)
	}
	if string(res.Stderr) != "er" || !res.Truncated {
		t.Errorf("stderr = %q truncated=%v, want %q true", res.Stderr, res.Truncated, "er")
	}
}

func TestArgv(t *testing.T) {
	if argv, err := (ExecRequest{Shell: "echo hi"}).Argv(); err != nil || strings.Join(argv, "|") != "sh|-c|echo hi" {
		t.Errorf("shell argv = %q, %v", argv, err)
	}
	for _, r := range []ExecRequest{{}, {Cmd: []string{"ls"}, Shell: "ls"}} {
		if _, err := r.Argv(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Argv(%+v) error = %v, want ErrInvalidConfig", r, err)
		}
	}
}

func TestCapabilitiesCheck(t *testing.T) {
	caps := Capabilities{NetworkModes: []string{"bridge", "*"}, BindVolumes: true, MemoryLimit: true}
	ok := Spec{Network: "my-net", Volumes: []Volume{{Type: VolumeBind, Source: "/a", Target: "/b"}}, Resources: Resources{MemoryBytes: 1}}
	if err := caps.Check("x", ok); err != nil {
		t.Errorf("Check(%+v) = %v", ok, err)
	}
	bad := Spec{Network: "host", Privileged: true, Resources: Resources{CPUs: 1}, Volumes: []Volume{{Type: VolumeNamed, Source: "data", Target: "/d"}}}
	err := caps.Check("demo", bad)
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Check = %v, want ErrUnsupported", err)
	}
	for _, want := range []string{"demo backend", `network "host"`, "privileged", "cpus", `volume "data:/d"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// A backend that cannot enforce an egress policy refuses it, saying why.
func TestCapabilitiesCheckEgress(t *testing.T) {
	spec := Spec{Egress: &Egress{Allow: []string{"pypi.org:443"}}}
	if err := (Capabilities{Egress: true}).Check("x", spec); err != nil {
		t.Errorf("a backend that enforces egress refused it: %v", err)
	}
	err := (Capabilities{EgressWhy: "no network of its own"}).Check("demo", spec)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "egress (no network of its own)") {
		t.Errorf("Check = %v, want ErrUnsupported naming egress and why", err)
	}
	err = (Capabilities{}).Check("demo", spec)
	if err == nil || !strings.Contains(err.Error(), "egress (it does not enforce egress policies)") {
		t.Errorf("Check without a reason = %v", err)
	}
	if err := (Capabilities{}).Check("demo", Spec{}); err != nil {
		t.Errorf("a Spec without a policy: %v", err)
	}
}

// A backend that cannot run a main process of the entry's choosing refuses
// a Spec with a Command, naming it; without a Command, or on any other
// backend, the Spec is fine.
func TestCapabilitiesCheckNoCommand(t *testing.T) {
	spec := Spec{Command: []string{"sleep", "infinity"}}
	err := (Capabilities{NoCommand: true}).Check("demo", spec)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "the demo backend cannot honour command") {
		t.Errorf("Check = %v, want ErrUnsupported naming the command", err)
	}
	if err := (Capabilities{NoCommand: true}).Check("demo", Spec{}); err != nil {
		t.Errorf("a Spec without a Command: %v", err)
	}
	if err := (Capabilities{}).Check("demo", spec); err != nil {
		t.Errorf("a backend that runs commands refused one: %v", err)
	}
}

func TestFilterMatch(t *testing.T) {
	info := Info{Name: "main", Session: "s", Labels: map[string]string{"a": "1"}}
	cases := []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{Name: "main", Session: "s", Labels: map[string]string{"a": "1"}}, true},
		{Filter{Name: "other"}, false},
		{Filter{Session: "t"}, false},
		{Filter{Labels: map[string]string{"a": "2"}}, false},
		{Filter{Labels: map[string]string{"b": ""}}, false},
	}
	for _, c := range cases {
		if got := c.f.Match(info); got != c.want {
			t.Errorf("%+v.Match = %v, want %v", c.f, got, c.want)
		}
	}
	if !(Info{ExpiresAt: time.Unix(10, 0)}).Expired(time.Unix(10, 0)) || (Info{}).Expired(time.Now()) {
		t.Error("Expired: wrong at the expiry instant or with no TTL")
	}
}

func TestWrapOp(t *testing.T) {
	if WrapOp("exec", "b", "id", nil) != nil {
		t.Fatal("WrapOp(nil) != nil")
	}
	err := WrapOp("exec", "local", "abc", fmt.Errorf("boom: %w", ErrNotFound))
	if !errors.Is(err, ErrNotFound) || err.Error() != "local: exec sandbox abc: boom: not found" {
		t.Errorf("err = %q", err)
	}
	if again := WrapOp("read", "local", "abc", err); again != err {
		t.Errorf("wrapping the same sandbox twice stacked prefixes: %q", again)
	}
}

// Limits that would silently become "no limit" or overflow a backend's
// arithmetic are refused by every backend's Check, naming the key.
func TestResourcesValidate(t *testing.T) {
	for _, r := range []Resources{{CPUs: 1e-10}, {CPUs: 1e30}, {CPUs: -1}, {MemoryBytes: -1}, {PidsLimit: -2}, {ShmBytes: -3}} {
		err := (Capabilities{CPULimit: true, MemoryLimit: true, PidsLimit: true, ShmSize: true}).Check("x", Spec{Resources: r})
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: got %v, want ErrInvalidConfig", r, err)
		}
	}
	for _, r := range []Resources{{}, {CPUs: 0.01}, {CPUs: 1.5}, {CPUs: 1024}} {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
}
