// Package sbxd is the host side of sandboxkit's in-sandbox agent: its
// client, and the description of the protocol. Together they make one fast,
// multiplexed channel into every sandbox, over the backend's own attached
// exec stream, so it needs no port, no network and no image changes.
//
// # Packages
//
// The agent itself (the server that `sbxd serve` runs inside a sandbox) is
// package [github.com/sandboxkit/sandboxkit/sbxd/agent], and the wire
// types both ends share are in internal/sbxdwire. cmd/sbxd links those two
// and nothing of this package, of package backend or of the rest of the
// host's side, so a change there leaves the agent binaries that
// internal/sbxdbin embeds as they are. This package keeps the agent's
// names ([Server], [NewServer], [StartCommand], ...) as aliases of
// package agent's, and re-exports the wire types its API uses
// ([JobStatus], [GrepRequest], [TerminalStatus], ...).
//
// # How it works
//
// [Wrap] starts `sbxd serve` once per sandbox through the sandbox's
// [backend.Attacher] capability (found through Unwrap chains with
// [backend.As]). The agent's stdin and stdout become one connection, which
// [yamux] multiplexes into streams; every request is plain HTTP/1.1 on a
// stream of its own (idle streams are reused), served by net/http inside
// the sandbox:
//
//	client (this package)                        sbxd serve (in the sandbox)
//	net/http Transport ── yamux ── attached stdin/stdout ── yamux ── net/http Server
//
// HTTP was chosen over a hand-rolled RPC because it already has what the
// operations need: streamed request bodies (stdin, file uploads), streamed
// responses (output, downloads, NDJSON listings) flushed as they are
// produced, full duplex on one stream, trailers for a command's exit
// status, and request cancellation when a stream closes. Exec output uses
// Docker's stdcopy framing (an 8-byte header per chunk naming stdout or
// stderr); every other body is JSON or raw bytes. yamux's per-stream flow
// control bounds memory on both ends: a command printing gigabytes is read
// only as fast as the caller's writer takes it.
//
// # Versions
//
// The first request on a new agent is a hello that reports its protocol
// number ([ProtocolVersion]). A client talks only to an agent with its own
// number. When the agent at the agent path (the native backend mounts one
// at [DefaultAgentPath]) is missing, does not start or is stale, the client
// copies the sbxd binary for the sandbox's architecture (internal/sbxdbin,
// or $SBX_SBXD_PATH) into /tmp/.sbxd/<hash>/ in the sandbox and starts
// that one. When that fails too (no attached exec, an unsupported
// architecture, a noexec /tmp), it logs a warning and every call takes the
// wrapped sandbox's own per-command path: a Client always works, the agent
// only makes it fast.
//
// # Operations
//
// [Client] implements [backend.Sandbox] (Exec with streaming, stdin,
// timeouts that kill the whole process tree with exit code 124, and
// cancellation) and [backend.FileSystem] natively, so sbfiles.ReadFile,
// fileops and everything else built on them use the agent without
// knowing it. It adds byte- and line-range reads, mkdir -p, remove, move,
// glob with "**", grep with context lines, an exact-string edit with the
// uniqueness rule, a tree walk (the fileops.FileWalker capability) and
// background jobs whose output is kept on disk, bounded, and read from a
// cursor.
//
// Files of DefaultBulkThreshold (8 MiB) and more move through the wrapped
// sandbox's own backend.FileSystem when it has one (the engine's archive
// API on native, plain host files on local), which carries bulk data
// faster than an exec stream; the agent still resolves the path, makes the
// parents and renames a temporary file over the target, so such a write is
// atomic as well.
//
// # Failures
//
// When the agent or its stream dies, calls in flight fail with an error
// wrapping [ErrAgentLost]; the next call starts a new agent. Background jobs
// do not depend on the agent that started it: they run in sessions of their
// own, and an agent whose client went away stays until its jobs end, so
// their output keeps being collected.
//
// [yamux]: https://github.com/hashicorp/yamux
package sbxd
