// Package fileopstest is the table of agent-visible fileops behaviour that
// every backend runs: the exact text each tool answers for the cases the
// package documentation of fileops specifies. A backend's tests call Run
// with a factory for its sandboxes, once as they are and once wrapped with
// backendtest.HideCapabilities so the generic, Exec-based path is covered
// too.
package fileopstest

import (
	"context"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/fileops"
)

// Run runs every case against one sandbox made by newSandbox, which is
// called once and must arrange its own cleanup (t.Cleanup). Cases run in
// parallel, each in a directory of its own that mktemp makes under
// ${TMPDIR:-/tmp} in the sandbox and that is removed afterwards, so the
// sandbox needs sh and coreutils (or busybox) and a writable temporary
// directory. No case globs or greps outside its directory.
func Run(t *testing.T, newSandbox func(t *testing.T) backend.Sandbox) {
	sb := newSandbox(t)
	for _, group := range [][]testCase{lsCases, readCases, writeCases, editCases, globCases, grepCases, executeCases, edgeCases} {
		for _, c := range group {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, newEnv(t, sb))
			})
		}
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, e *env)
}

// env is one case's sandbox, tools and directory.
type env struct {
	t     *testing.T
	ctx   context.Context
	sb    backend.Sandbox
	tools *fileops.Tools
	dir   string // absolute, private to the case
}

func newEnv(t *testing.T, sb backend.Sandbox) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, sb: sb, tools: fileops.New(sb, fileops.Options{})}
	e.dir = strings.TrimSpace(e.shWorkDir(`mktemp -d "${TMPDIR:-/tmp}/fileopstest.XXXXXX"`))
	require.True(t, strings.HasPrefix(e.dir, "/"), "mktemp printed %q", e.dir)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// chmod first: a case may have left an unreadable directory.
		_, _ = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", `chmod -R u+rwx "$1"; rm -rf "$1"`, "sh", e.dir}})
	})
	return e
}

// p returns the absolute path of rel inside the case's directory.
func (e *env) p(rel string) string {
	if rel == "" {
		return e.dir
	}
	return e.dir + "/" + rel
}

// sh runs script in the sandbox in the case's directory, requires exit
// code 0 and returns stdout.
func (e *env) sh(script string) string {
	e.t.Helper()
	return e.exec(backend.ExecRequest{Cmd: []string{"sh", "-c", script}, WorkDir: e.dir})
}

// shWorkDir is sh in the sandbox's default working directory.
func (e *env) shWorkDir(script string) string {
	e.t.Helper()
	return e.exec(backend.ExecRequest{Cmd: []string{"sh", "-c", script}})
}

// inWorkDir makes a directory for the case in the sandbox's default working
// directory, removed afterwards, and returns its relative name.
func (e *env) inWorkDir() string {
	e.t.Helper()
	name := "fileopstest-" + path.Base(e.dir)
	e.shWorkDir("mkdir " + name)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = e.sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"rm", "-rf", name}})
	})
	return name
}

func (e *env) exec(req backend.ExecRequest) string {
	e.t.Helper()
	script := req.Cmd[2]
	res, err := e.sb.Exec(e.ctx, req)
	require.NoError(e.t, err, "exec %q", script)
	require.Equal(e.t, 0, res.ExitCode, "exec %q: stdout %q, stderr %q", script, res.Stdout, res.Stderr)
	return string(res.Stdout)
}

// write creates rel with content (and its parents).
func (e *env) write(rel, content string) {
	e.t.Helper()
	require.NoError(e.t, sbfiles.WriteFile(e.ctx, e.sb, e.p(rel), strings.NewReader(content), 0o644))
}

// cat returns rel's content.
func (e *env) cat(rel string) string {
	e.t.Helper()
	return e.sh(fmt.Sprintf(`cat -- %q`, e.p(rel)))
}

// touch sets the modification time of each rel to the Unix time sec
// (touch -d @N works with GNU coreutils and busybox).
func (e *env) touch(sec int64, rels ...string) {
	e.t.Helper()
	var b strings.Builder
	for _, r := range rels {
		fmt.Fprintf(&b, "touch -c -d @%d -- %q\n", sec, e.p(r))
	}
	e.sh(b.String())
}

// lines joins its arguments with "\n", for expected multi-line output.
func lines(l ...string) string { return strings.Join(l, "\n") }

// toolError requires err to be a *fileops.ToolError with exactly text.
func toolError(t *testing.T, err error, text string) *fileops.ToolError {
	t.Helper()
	require.Error(t, err)
	te, ok := err.(*fileops.ToolError)
	require.True(t, ok, "error %T %q is not a *fileops.ToolError", err, err)
	require.Equal(t, text, te.Error())
	return te
}
