package sbxd

import (
	"io"
	"os/exec"
	"syscall"

	"github.com/sandboxkit/sandboxkit/sbxd/agent"
)

// The agent's side (what `sbxd serve` runs inside a sandbox) is package
// sbxd/agent, which cmd/sbxd links without this package, so that a change
// to the host's side (package backend, this client) leaves the agent's
// binary as it is. Its names stay here too, for code written against them.

// Server is the agent (see agent.Server).
type Server = agent.Server

// ServerOptions configures the agent side (see agent.ServerOptions).
type ServerOptions = agent.ServerOptions

// DefaultJobOutputLimit is how many bytes of a background job's most recent
// output the agent keeps on disk.
const DefaultJobOutputLimit = agent.DefaultJobOutputLimit

// TerminalScrollback is how many bytes of a terminal's most recent output
// the agent keeps for clients that attach later.
const TerminalScrollback = agent.TerminalScrollback

// NewServer returns an agent with opts (see agent.NewServer).
func NewServer(opts ServerOptions) *Server { return agent.NewServer(opts) }

// NewCoalescingWriter returns w with small yamux data frames written in one
// call (see agent.NewCoalescingWriter). It is for one writer goroutine
// (yamux's send loop).
func NewCoalescingWriter(w io.Writer) io.Writer { return agent.NewCoalescingWriter(w) }

// EnableReaping makes this process the reaper of orphans (see
// agent.EnableReaping).
func EnableReaping() { agent.EnableReaping() }

// StartCommand starts cmd; while reaping is on, cmd's process is reaped by
// WaitCommand, never by ReapOrphans (see agent.StartCommand).
func StartCommand(cmd *exec.Cmd) error { return agent.StartCommand(cmd) }

// WaitCommand waits for a command StartCommand started.
func WaitCommand(cmd *exec.Cmd) error { return agent.WaitCommand(cmd) }

// ReapOrphans reaps every exited child of this process that no command
// registered (see agent.ReapOrphans). Call it on SIGCHLD.
func ReapOrphans() { agent.ReapOrphans() }

// LookupUser resolves a user for a command as docker exec --user does (see
// agent.LookupUser), returning its credential and home directory.
func LookupUser(spec string) (*syscall.Credential, string, error) { return agent.LookupUser(spec) }
