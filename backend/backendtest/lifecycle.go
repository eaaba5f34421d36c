package backendtest

import (
	"errors"
	"maps"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

func (s *suite) testGet(t *testing.T) {
	sb := s.create(t, s.spec("get"))
	mustExec(t, testCtx(t), sb, backend.ExecRequest{Shell: `echo reattached > bt-get-marker`})

	// checkSame fails t unless got is sb: same ID, and it sees the file sb's
	// command wrote.
	checkSame := func(t *testing.T, got backend.Sandbox) {
		t.Helper()
		if got.ID() != sb.ID() {
			t.Errorf("ID() = %q, want %q", got.ID(), sb.ID())
		}
		res := mustExec(t, testCtx(t), got, backend.ExecRequest{Cmd: []string{"cat", "bt-get-marker"}})
		checkOutput(t, "stdout", res.Stdout, "reattached\n")
		info, err := got.Info(testCtx(t))
		if err != nil || info.ID != sb.ID() || info.Name != "get" {
			t.Errorf("Info() = ID %q, name %q, error %v; want %q, %q, nil", info.ID, info.Name, err, sb.ID(), "get")
		}
	}

	t.Run("reattach by ID", func(t *testing.T) {
		t.Parallel()
		got, err := s.b.Get(testCtx(t), sb.ID())
		if err != nil {
			t.Fatalf("Get(%q): %v", sb.ID(), err)
		}
		checkSame(t, got)
	})
	t.Run("unknown ID is ErrNotFound", func(t *testing.T) {
		t.Parallel()
		_, err := s.b.Get(testCtx(t), "bt-no-such-sandbox-"+s.runID)
		checkErr(t, "Get", err, backend.ErrNotFound)
	})
	t.Run("from a second backend", func(t *testing.T) {
		t.Parallel()
		if !s.caps.Persistent {
			t.Skip("the backend is not Persistent")
		}
		t.Run("open", func(t *testing.T) {
			b2 := s.newBackend(t)
			got, err := b2.Get(testCtx(t), sb.ID())
			if err != nil {
				t.Fatalf("Get(%q) from a second backend: %v", sb.ID(), err)
			}
			checkSame(t, got)
			infos, err := b2.List(testCtx(t), backend.Filter{Name: "get", Labels: map[string]string{labelRun: s.runID}})
			if err != nil {
				t.Fatalf("List from a second backend: %v", err)
			}
			if ids := infoIDs(infos); !slices.Equal(ids, []string{sb.ID()}) {
				t.Errorf("List from a second backend = %v, want [%s]", ids, sb.ID())
			}
		})
		// The second backend is closed now (newBackend registers Close
		// with the subtest's Cleanup); the sandbox must still run.
		res := mustExec(t, testCtx(t), sb, backend.ExecRequest{Cmd: []string{"echo", "still here"}})
		checkOutput(t, "stdout after the second backend closed", res.Stdout, "still here\n")
	})
}

func infoIDs(infos []backend.Info) []string {
	ids := make([]string, 0, len(infos))
	for _, info := range infos {
		ids = append(ids, info.ID)
	}
	return ids
}

func (s *suite) testList(t *testing.T) {
	const group = "backendtest.group"
	specA := s.spec("list-a")
	specA.Session = s.runID + "-a"
	specA.Labels["backendtest.role"] = "a"
	specA.Labels[group] = "list"
	specA.TTL = time.Hour
	specB := s.spec("list-b")
	specB.Session = s.runID + "-b"
	specB.Labels["backendtest.role"] = "b"
	specB.Labels[group] = "list"
	specB.TTL = 0
	before := time.Now()
	a := s.create(t, specA)
	b := s.create(t, specB)
	after := time.Now()

	sorted := []string{a.ID(), b.ID()}
	slices.Sort(sorted)
	for _, c := range []struct {
		name   string
		filter backend.Filter
		want   []string
	}{
		{"by label, sorted by ID", backend.Filter{Labels: map[string]string{labelRun: s.runID, group: "list"}}, sorted},
		{"by session", backend.Filter{Session: specA.Session}, []string{a.ID()}},
		{"by name and label", backend.Filter{Name: "list-b", Labels: map[string]string{labelRun: s.runID}}, []string{b.ID()}},
		{"by labels", backend.Filter{Labels: map[string]string{labelRun: s.runID, "backendtest.role": "b"}}, []string{b.ID()}},
		{"every field must match", backend.Filter{Session: specA.Session, Labels: map[string]string{"backendtest.role": "b"}}, []string{}},
		{"unknown label value", backend.Filter{Labels: map[string]string{labelRun: s.runID, "backendtest.role": "c"}}, []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			infos, err := s.b.List(testCtx(t), c.filter)
			if err != nil {
				t.Fatalf("List(%+v): %v", c.filter, err)
			}
			if got := infoIDs(infos); !slices.Equal(got, c.want) {
				t.Errorf("List(%+v) = %v, want %v", c.filter, got, c.want)
			}
		})
	}
	t.Run("by name", func(t *testing.T) {
		t.Parallel()
		// Other sandboxes may carry the name: check membership only.
		infos, err := s.b.List(testCtx(t), backend.Filter{Name: "list-a"})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		ids := infoIDs(infos)
		if !slices.Contains(ids, a.ID()) || slices.Contains(ids, b.ID()) {
			t.Errorf("List(name list-a) = %v, want %s in it and not %s", ids, a.ID(), b.ID())
		}
		if !slices.IsSorted(ids) {
			t.Errorf("List(name list-a) = %v, want it sorted by ID", ids)
		}
	})
	t.Run("info", func(t *testing.T) {
		t.Parallel()
		listed, err := s.b.List(testCtx(t), backend.Filter{Labels: map[string]string{labelRun: s.runID, group: "list"}})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, c := range []struct {
			sb   backend.Sandbox
			spec backend.Spec
		}{{a, specA}, {b, specB}} {
			info, err := c.sb.Info(testCtx(t))
			if err != nil {
				t.Fatalf("Info of %s: %v", c.spec.Name, err)
			}
			s.checkInfo(t, "Info of "+c.spec.Name, info, c.sb.ID(), c.spec, before, after)
			i := slices.IndexFunc(listed, func(info backend.Info) bool { return info.ID == c.sb.ID() })
			if i < 0 {
				t.Errorf("List does not return %s", c.spec.Name)
				continue
			}
			s.checkInfo(t, "List entry of "+c.spec.Name, listed[i], c.sb.ID(), c.spec, before, after)
		}
	})
}

// checkInfo checks what Info says about a running sandbox made from spec
// between before and after.
func (s *suite) checkInfo(t *testing.T, what string, info backend.Info, id string, spec backend.Spec, before, after time.Time) {
	t.Helper()
	// The sandbox's clock may be another machine's.
	const skew = time.Minute
	if info.ID != id || info.Backend != s.b.Name() || info.Name != spec.Name || info.Session != spec.Session {
		t.Errorf("%s: ID, Backend, Name, Session = %q, %q, %q, %q; want %q, %q, %q, %q", what,
			info.ID, info.Backend, info.Name, info.Session, id, s.b.Name(), spec.Name, spec.Session)
	}
	if info.State != backend.StateRunning {
		t.Errorf("%s: State = %q, want %q", what, info.State, backend.StateRunning)
	}
	for k, v := range spec.Labels {
		if got, ok := info.Labels[k]; !ok || got != v {
			t.Errorf("%s: Labels[%q] = %q (present %v), want %q from Spec.Labels", what, k, got, ok, v)
		}
	}
	if info.CreatedAt.Before(before.Add(-skew)) || info.CreatedAt.After(after.Add(skew)) {
		t.Errorf("%s: CreatedAt = %v, want between %v and %v", what, info.CreatedAt, before, after)
	}
	switch {
	case spec.TTL == 0 && !info.ExpiresAt.IsZero():
		t.Errorf("%s: ExpiresAt = %v, want zero (no TTL)", what, info.ExpiresAt)
	case spec.TTL != 0 && s.cfg.idleTTL != "":
		// The window started again at the latest with the call that
		// returned info.
		least, most := info.CreatedAt.Add(spec.TTL), time.Now().Add(spec.TTL)
		if info.ExpiresAt.Before(least.Add(-skew)) || info.ExpiresAt.After(most.Add(skew)) {
			t.Errorf("%s: ExpiresAt = %v, want between CreatedAt + TTL (%v) and now + TTL (%v): the TTL is an idle window (%s)", what, info.ExpiresAt, least, most, s.cfg.idleTTL)
		}
	case spec.TTL != 0:
		want := info.CreatedAt.Add(spec.TTL)
		if d := info.ExpiresAt.Sub(want); d < -skew || d > skew {
			t.Errorf("%s: ExpiresAt = %v, want CreatedAt + TTL (%v)", what, info.ExpiresAt, want)
		}
	}
	if info.Expired(time.Now()) {
		t.Errorf("%s: Expired(now) is true", what)
	}
	if !path.IsAbs(info.WorkDir) {
		t.Errorf("%s: WorkDir = %q, want an absolute path", what, info.WorkDir)
	}
}

func (s *suite) testDestroy(t *testing.T) {
	t.Run("idempotent and final", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, s.spec("destroy"))
		ctx := testCtx(t)
		other, err := s.b.Get(ctx, sb.ID())
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("second Destroy: %v, want nil", err)
		}
		if err := other.Destroy(ctx); err != nil {
			t.Errorf("Destroy through a second handle: %v, want nil", err)
		}
		_, err = s.b.Get(ctx, sb.ID())
		checkErr(t, "Get after Destroy", err, backend.ErrNotFound)
		if res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "hi"}}); err == nil {
			t.Errorf("Exec after Destroy: exit code %d, stdout %s, no error; want an error", res.ExitCode, quote(res.Stdout))
		}
		infos, err := s.b.List(ctx, backend.Filter{Labels: map[string]string{labelRun: s.runID}})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if slices.Contains(infoIDs(infos), sb.ID()) {
			t.Errorf("List after Destroy still returns %s", sb.ID())
		}
	})
	t.Run("ends running commands", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, s.spec("destroy-running"))
		ctx := testCtx(t)
		_, done := startTree(t, ctx, sb)
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Exec of a 30 s command did not return within 10 s of Destroy")
		}
	})
}

// testCapabilities checks that Create refuses every option the backend's
// Capabilities say it cannot honour, and makes nothing.
func (s *suite) testCapabilities(t *testing.T) {
	caps := s.caps
	for _, o := range []struct {
		name      string // as the error must name it
		supported bool
		set       func(*backend.Spec)
	}{
		{"privileged", caps.Privileged, func(sp *backend.Spec) { sp.Privileged = true }},
		{"cap_add", caps.CapAdd, func(sp *backend.Spec) { sp.CapAdd = []string{"NET_ADMIN"} }},
		{"cap_drop", caps.CapDrop, func(sp *backend.Spec) { sp.CapDrop = []string{"NET_RAW"} }},
		{"security_opt", caps.SecurityOpt, func(sp *backend.Spec) { sp.SecurityOpt = []string{"no-new-privileges"} }},
		{"read_only", caps.ReadOnlyRootfs, func(sp *backend.Spec) { sp.ReadOnlyRootfs = true }},
		{"platform", caps.Platform, func(sp *backend.Spec) { sp.Platform = "linux/" + runtime.GOARCH }},
		{"container_name", caps.ContainerName, func(sp *backend.Spec) { sp.ContainerName = "backendtest-" + randomHex(6) }},
		{"hostname", caps.Hostname, func(sp *backend.Spec) { sp.Hostname = "backendtest" }},
		{"extra hosts", caps.ExtraHosts, func(sp *backend.Spec) { sp.ExtraHosts = []string{"backendtest.invalid:192.0.2.1"} }},
		{"user", caps.User, func(sp *backend.Spec) { sp.User = "65534" }},
		{"cpus", caps.CPULimit, func(sp *backend.Spec) { sp.Resources.CPUs = 0.5 }},
		{"mem_limit", caps.MemoryLimit, func(sp *backend.Spec) { sp.Resources.MemoryBytes = 256 << 20 }},
		{"pids_limit", caps.PidsLimit, func(sp *backend.Spec) { sp.Resources.PidsLimit = 100 }},
		{"gpus", caps.GPUs, func(sp *backend.Spec) { sp.Resources.GPUs = "all" }},
		{"shm_size", caps.ShmSize, func(sp *backend.Spec) { sp.Resources.ShmBytes = 64 << 20 }},
		{"ports", caps.Ports, func(sp *backend.Spec) { sp.Ports = []backend.Port{{Port: 8080}} }},
		{"volume", caps.BindVolumes, func(sp *backend.Spec) {
			sp.Volumes = []backend.Volume{{Type: backend.VolumeBind, Source: "/", Target: "/mnt/backendtest"}}
		}},
		{"volume", caps.NamedVolumes, func(sp *backend.Spec) {
			sp.Volumes = []backend.Volume{{Type: backend.VolumeNamed, Source: "backendtest", Target: "/mnt/backendtest"}}
		}},
		{"network", slices.Contains(caps.NetworkModes, "none"), func(sp *backend.Spec) { sp.Network = "none" }},
		{"runtime", slices.Contains(caps.Runtimes, "backendtest-no-such-runtime"), func(sp *backend.Spec) { sp.Runtime = "backendtest-no-such-runtime" }},
		{"command", caps.ImageCommand, func(sp *backend.Spec) { sp.ImageCommand = true }},
	} {
		spec := s.spec("unsupported")
		o.set(&spec)
		name := "refuses " + o.name
		if o.name == "volume" {
			name = map[backend.VolumeType]string{
				backend.VolumeBind:  "refuses bind volume",
				backend.VolumeNamed: "refuses named volume",
			}[spec.Volumes[0].Type]
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if o.supported {
				t.Skip("the backend supports it")
			}
			marker := map[string]string{labelRun: s.runID, "backendtest.case": randomHex(6)}
			maps.Copy(spec.Labels, marker)
			// What sbx config check asks refuses it too, without
			// making anything (backend.CheckSpec: the backend's
			// backend.SpecChecker, else its Capabilities).
			if err := backend.CheckSpec(testCtx(t), s.b, spec); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), o.name) {
				t.Errorf("CheckSpec with %s = %v, want the refusal Create gives (errors.ErrUnsupported naming it)", o.name, err)
			}
			sb, err := s.b.Create(testCtx(t), spec)
			if err == nil {
				destroyAtCleanup(t, sb)
				t.Fatalf("Create with %s succeeded; Capabilities say the backend cannot honour it", o.name)
			}
			checkErr(t, "Create", err, errors.ErrUnsupported)
			if msg := err.Error(); !strings.Contains(msg, o.name) || !strings.Contains(msg, s.b.Name()) {
				t.Errorf("Create error %q does not name the option (%s) and the backend (%s)", msg, o.name, s.b.Name())
			}
			infos, err := s.b.List(testCtx(t), backend.Filter{Labels: marker})
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if len(infos) != 0 {
				t.Errorf("the refused Create left sandboxes %v", infoIDs(infos))
			}
			for _, info := range infos {
				// Only what really carries the marker: List may be the bug.
				if (backend.Filter{Labels: marker}).Match(info) {
					if sb, err := s.b.Get(testCtx(t), info.ID); err == nil {
						destroyAtCleanup(t, sb)
					}
				}
			}
		})
	}
}
