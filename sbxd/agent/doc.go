// Package agent is sbxd's server: the agent that runs inside a sandbox
// (`sbxd serve`, and `sbxd init --agent`; see cmd/sbxd) and answers the
// requests of package sbxd's Client, multiplexed by yamux over one stream
// (the attached exec's stdin and stdout, or a socket the sandbox serves).
// Package sbxd describes the protocol and its operations; the wire types
// both ends share are in internal/sbxdwire.
//
// A [Server] runs commands in process groups of their own, marked with
// SBX_EXEC_ID so that a timeout or a cancel kills the whole tree; reads,
// writes (atomic: a temporary file renamed over the target), walks, globs,
// greps and edits files natively; keeps background jobs' output on disk
// under [ServerOptions].StateDir, so that a job outlives the agent that
// started it; and holds terminals on pseudo-terminals that clients attach
// to and detach from. [EnableReaping], [StartCommand], [WaitCommand] and
// [ReapOrphans] let an agent that is its sandbox's first process reap
// orphans without reaping its own commands.
//
// The package links into the agent binary that internal/sbxdbin embeds,
// so it imports no host-side package (none of package backend, the
// contract; backendkit; internal/statedir; internal/sbxdbin; package sbxd,
// the client), only the wire package and the agent's own leaves
// (internal/hostfs, internal/outpipe, internal/procfs, internal/pty,
// internal/stdinpipe, internal/errdefs). A change to the host-side
// contract alone thus leaves the embedded binaries as they are
// (TestAgentLinksNoBackend in internal/sbxdbin checks the import graph).
// Package sbxd re-exports this package's names (sbxd.Server,
// sbxd.NewServer, ...) for code written against it.
package agent
