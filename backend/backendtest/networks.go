package backendtest

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// networkPort is where the NetworkManager case's sandboxes serve HTTP on
// their session network.
const networkPort = 8080

// testNetworkManager makes a network and two sandboxes on it, each serving
// a page of its own, and checks that each fetches the other's by its
// Spec.Name; then that ListNetworks finds the network and RemoveNetwork
// removes it (twice).
func (s *suite) testNetworkManager(t *testing.T) {
	nm, ok := backend.AsBackend[backend.NetworkManager](s.b)
	if !ok {
		t.Skip("the backend is not a NetworkManager")
	}
	if !slices.Contains(s.caps.NetworkModes, "*") {
		t.Fatal(`the backend is a NetworkManager but its Capabilities' NetworkModes have no "*": no sandbox can join its networks`)
	}
	ctx := testCtx(t)
	base := s.spec("network")
	session := s.runID + "-net"
	nspec := backend.NetworkSpec{Session: session, Labels: base.Labels, TTL: base.TTL}
	name, err := nm.CreateNetwork(ctx, nspec)
	if err != nil {
		t.Fatalf("CreateNetwork(%+v): %v", nspec, err)
	}
	if name == "" {
		t.Fatal("CreateNetwork returned no name")
	}
	// Registered before the sandboxes are made, so it runs after they are
	// destroyed.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), destroyTimeout)
		defer cancel()
		if err := nm.RemoveNetwork(ctx, name); err != nil {
			t.Errorf("cleanup: RemoveNetwork(%q): %v", name, err)
		}
	})

	// Two members, made concurrently, each serving its name and a token.
	names := []string{"net-a", "net-b"}
	token := randomHex(6)
	members := make([]backend.Sandbox, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		spec := s.spec(n)
		spec.Session = session
		spec.Network = name
		s.needCommand(t)
		spec.Command, spec.ImageCommand = serveCommand(networkPort, n+" "+token), false
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(t.Context(), createTimeout)
			defer cancel()
			sb, err := s.b.Create(cctx, spec)
			if err != nil {
				t.Errorf("Create(%q) on network %s: %v", n, name, err)
				return
			}
			members[i] = sb
		})
	}
	wg.Wait()
	for _, sb := range members {
		if sb != nil {
			destroyAtCleanup(t, sb)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for i, sb := range members {
		peer := names[1-i]
		var res backend.ExecResult
		var body string
		var err error
		if !poll(readyTimeout, func() bool {
			res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: fetchCommand(peer, networkPort)})
			if err == nil && res.ExitCode == 0 {
				body, err = responseBody(res.Stdout)
				return err == nil
			}
			return false
		}) {
			logs, _ := mainLogs(ctx, members[1-i])
			t.Fatalf("%s fetching http://%s:%d/ on network %s: exit %d, stdout %s, stderr %s, error %v (for %v)%s",
				names[i], peer, networkPort, name, res.ExitCode, quote(res.Stdout), quote(res.Stderr), err, readyTimeout, logs)
		}
		if want := peer + " " + token + "\n"; body != want {
			t.Errorf("%s fetching http://%s:%d/: %q, want %q", names[i], peer, networkPort, body, want)
		}
	}

	list := func(f backend.Filter) []string {
		t.Helper()
		nets, err := nm.ListNetworks(ctx, f)
		if err != nil {
			t.Fatalf("ListNetworks(%+v): %v", f, err)
		}
		var got []string
		for _, n := range nets {
			got = append(got, n.Name)
			if n.Name == name && (n.Session != session || n.Labels[labelRun] != s.runID) {
				t.Errorf("ListNetworks: %s has session %q and %s label %q, want %q and %q", name, n.Session, labelRun, n.Labels[labelRun], session, s.runID)
			}
		}
		return got
	}
	if got := list(backend.Filter{Session: session}); !slices.Equal(got, []string{name}) {
		t.Errorf("ListNetworks(session %s) = %v, want [%s]", session, got, name)
	}
	if got := list(backend.Filter{Labels: map[string]string{labelRun: s.runID}}); !slices.Contains(got, name) {
		t.Errorf("ListNetworks(label %s=%s) = %v, want %s in it", labelRun, s.runID, got, name)
	}
	if got := list(backend.Filter{Session: session + "-other"}); slices.Contains(got, name) {
		t.Errorf("ListNetworks(another session) = %v, want no %s", got, name)
	}

	for _, sb := range members {
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("Destroy(%s): %v", sb.ID(), err)
		}
	}
	if err := nm.RemoveNetwork(ctx, name); err != nil {
		t.Fatalf("RemoveNetwork(%q): %v", name, err)
	}
	if got := list(backend.Filter{Session: session}); len(got) != 0 {
		t.Errorf("ListNetworks(session %s) after RemoveNetwork = %v, want none", session, got)
	}
	if err := nm.RemoveNetwork(ctx, name); err != nil {
		t.Errorf("RemoveNetwork(%q) of a removed network: %v, want nil", name, err)
	}
}
