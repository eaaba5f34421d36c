package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/internal/cli/serveapi"
)

// Features is what a build of sbx links. Go runs the initialisers of every
// package a program links before main, so each library costs every sbx
// process its start whether the command uses it or not: sbx (cmd/sbx)
// links the backends of catalog/core and no server, and starts in about
// half the time of sbx-full (cmd/sbx-full), which links everything and
// takes over, in the same process, what sbx does not link (runFull).
type Features struct {
	// Backends registers the backends this build links.
	Backends func(*config.Registry)
	// Elsewhere names the backends only sbx-full links
	// (config.Registry.Elsewhere); nil in sbx-full.
	Elsewhere func(*config.Registry)
	// Server is sbx serve's and sbx mcp's work; nil: those commands are
	// handed over.
	Server *serveapi.Server
}

// features is the build's, set by Main (tests: TestMain).
var features Features

// registry is the build's backends, made once features is set.
var registry = sync.OnceValue(func() *config.Registry {
	r := config.NewRegistry()
	features.Backends(r)
	if features.Elsewhere != nil {
		features.Elsewhere(r)
	}
	return r
})

// FullName is the build of sbx that links every backend and the server.
const FullName = "sbx-full"

// envHandedOver marks a process that sbx handed over to: it never hands
// over again (a copy of sbx installed as sbx-full would loop).
const envHandedOver = "SBX_HANDED_OVER"

// keepHandOverMark leaves envHandedOver set only in a build that hands
// over (a copy of sbx installed as sbx-full must see it): sbx-full drops
// it, so that the commands it runs (host processes on local, an sbx they
// start) do not inherit it.
func keepHandOverMark(f Features) {
	if !f.handsOver() {
		os.Unsetenv(envHandedOver)
	}
}

// handsOver says whether the build gives anything to sbx-full: a backend
// it does not link, or serve and mcp.
func (f Features) handsOver() bool { return f.Elsewhere != nil || f.Server == nil }

// runFull runs sbx-full in this process's place (exec: the same process,
// streams, arguments and environment), for what this build does not link;
// why names it ("sbx serve", "the k8s backend"). It returns only when that
// fails. It must be called before sbx did anything a second run would do
// again: sbx-full runs the whole command from the start.
func runFull(why string) error {
	if os.Getenv(envHandedOver) != "" {
		return fmt.Errorf("%s is not linked into this build, and this build was started as %s: install the real %s (go install github.com/sandboxkit/sandboxkit/cmd/%s)",
			why, FullName, FullName, FullName)
	}
	path, err := findFull()
	if err != nil {
		return fmt.Errorf("%s is in %s, the build of sbx with every backend and the server, which is neither next to this sbx nor on PATH (%v): "+
			"install it beside sbx with go install github.com/sandboxkit/sandboxkit/cmd/%s (or go build -o DIR/%s ./cmd/%s in a checkout)",
			why, FullName, err, FullName, FullName, FullName)
	}
	env := append(os.Environ(), envHandedOver+"=1")
	return fmt.Errorf("running %s for %s: %w", path, why, unix.Exec(path, os.Args, env))
}

// findFull finds sbx-full next to this program (as git finds its helpers),
// else on PATH.
func findFull() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), FullName)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(FullName)
}

// handOverElsewhere hands the command over when err says the config uses a
// backend this build does not link; any other err is returned.
func handOverElsewhere(err error) error {
	if e, ok := errors.AsType[*config.ElsewhereError](err); ok {
		return runFull("the " + e.Backend + " backend")
	}
	return err
}

// handOverFor hands the command over when backend (a name given on the
// command line; "" for none) is one this build does not link. It must be
// called before the command does anything.
func handOverFor(backend string) error {
	if backend == "" {
		return nil
	}
	// Any other error of the name is the command's to report.
	_, err := registry().Lookup(backend)
	if _, ok := errors.AsType[*config.ElsewhereError](err); !ok {
		return nil
	}
	return handOverElsewhere(err)
}

// fullsCommand is the place of a command this build does not link: it runs
// sbx-full with the same arguments, which also answers --help.
func fullsCommand(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Short:              short,
		DisableFlagParsing: true,
		RunE:               func(*cobra.Command, []string) error { return runFull("sbx " + use) },
	}
}
