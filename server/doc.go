// Package server gives AI agents sandboxes as a service, on whatever backend
// the config selects: MCP over streamable HTTP (sbx serve) or stdio (sbx mcp),
// and the same tools as plain JSON endpoints for callers without MCP.
//
// # Tools
//
// create_sandbox(type="main", timeout_minutes=30) returns a sandbox_id that
// every other tool takes; connect_sandbox(sandbox_id) reconnects and renews;
// list_sandboxes and delete_sandbox manage them; ls, read_file, write_file,
// edit_file, glob, grep and execute(command, timeout) are package fileops's
// tools with its output strings; execute(background=true) starts a job
// followed with job_status, job_output(cursor) and job_kill.
// terminal_start(command, rows, cols) runs an interactive program (a REPL,
// a shell, a debugger) on a pseudo-terminal and returns a terminal_id;
// terminal_send(terminal_id, input) types into it, terminal_read waits for
// its output (until wait_for matches, quiet_ms pass without output, timeout
// seconds pass or the program ends, with its exit code), and terminal_close
// kills it. Their output has escape sequences and carriage returns removed
// (termbuf.Strip) and is bounded like execute's. A sandbox keeps at most 16
// terminals; they need the sbxd agent unless the backend has terminals of
// its own, and are killed with their sandbox and when the server closes.
// A tool's failure is a result with IsError set and text starting
// "Error: ".
//
// # Terminal WebSocket
//
// GET /sandboxes/{id}/terminal (Handler) is the same terminals for people
// and programs that want raw bytes: a WebSocket that starts a program (a
// shell by default) or attaches to a terminal by ID, with the recent output
// replayed; binary messages carry the terminal's bytes both ways, JSON text
// messages resize it and report its start and exit. It takes the API key
// and the conversation as the tools do (the conversation also as a query
// parameter, for browsers), refuses pages of other origins, and keeps its
// sandbox from expiring while it is connected. A client that goes detaches
// (where terminals outlive their client; elsewhere its program is killed).
//
// # OpenSandbox API
//
// Handler also serves OpenSandbox's lifecycle API (/v1/sandboxes...) and,
// per sandbox, its execd API (through sbxd), so OpenSandbox's SDKs work
// against any backend (osb.go, osb_execd.go, osb_files.go,
// osb_sessions.go). Such sandboxes are made from the first type's Spec with
// the request's image, entrypoint, environment and limits, belong to the
// conversation "opensandbox" (or X-Conversation-Id), and follow the rules
// below; the request's timeout is their idle TTL. execd's endpoint is
// /execd/{id} with a per-sandbox route header (derived from the API key) in
// place of the API key, or the server proxy.
//
// # Rules
//
// A sandbox belongs to the conversation that created it: the MCP session, or
// the X-Conversation-Id header (on the JSON API always, on MCP when sent).
// Ownership is kept in the sandbox's labels (LabelConversation,
// LabelInstance), so it survives a restart of the server. Another
// conversation is told the sandbox does not exist, whatever it tries.
//
// A sandbox is removed after its idle TTL (Options.IdleTTL, or
// timeout_minutes) without tool calls; every call renews it, including
// connect_sandbox, and a call or background job still running counts as
// activity. It is removed
// at Options.MaxLifetime in any case: that is also the backend TTL it is
// created with, so sbx gc reaps what a dead server left. The server's reaper
// (Reap) does the removing; a call that finds its sandbox expired removes it
// too.
//
// On a backend without isolation (local: a sandbox is a folder and its
// commands are host processes) the file tools are confined to the
// sandbox's work folder through an os.Root, so no path or symlink reaches
// other sandboxes or the rest of the host; execute is not confined. The
// tool descriptions say what the backend isolates, sbx serve and sbx mcp
// warn at start (UnisolatedWarning), and CheckUnisolatedListen keeps such a
// server on loopback unless asked (FlagAllowUnisolated).
//
// Commands run through the sandbox's sbxd agent where it starts (background
// jobs then live in the sandbox and outlive the server), else through the
// backend, with jobs run by the server. The tools print the same either way.
//
// # Pools
//
// A type with a pool (Options.Pools; in a config, the entry's [pool] table)
// has ready sandboxes made before any call asks: made from the type's Spec
// and Provision, labelled with the server's instance and the type, and,
// unless NoAgent, with their sbxd agent started and connected. The keeper
// (session.Pool.Keep) runs from New to Close and refills the pool behind
// every claim. create_sandbox claims a ready sandbox (one of this server's,
// else of another keeper of the same pool, else a new one: an empty pool
// is never an error) and binds it to the conversation with the claim
// (backend.Claimer): LabelConversation and LabelIdleTTL, no owner, and
// MaxLifetime as its backend TTL from the claim. From then on it is a
// sandbox like any other for the rules above, found and adopted by its
// labels after a restart. A ready sandbox belongs to no conversation. When
// the conversation deletes it or it expires, it goes back to its pool,
// which removes it in the background (or takes it back where the backend's
// reset is provably clean); one adopted from an earlier run is removed as
// any other. Close removes the ready sandboxes, DeleteOnShutdown or not.
// PoolStats, and GET /pools over HTTP, give the pools' figures.
//
// # Limits
//
// Callers without the key, and callers that flood, cannot take what the
// answers to others need. A request's body is read only after its key is
// checked; a refused request's connection is closed, its body unread.
// Bodies must arrive within Options.BodyTimeout plus their size at
// BodyMinRate (else 408), and the bodies held in memory at once fit
// BodyBudget (a request that finds no room waits BodyWait, then gets 503
// with Retry-After). Serve holds at most MaxConns connections, and
// MaxConnsPerClient of one address: past a cap, a connection that has sent
// no request for a second (slow headers, idle) makes room, else the new one
// is answered 503 or 429 and closed; ReadHeaderTimeout and IdleTimeout
// close the rest. Answers, MCP's event streams, terminals and long
// commands are not timed. StdioTransport answers every request read
// before its input ends, then ends.
//
// # Lifecycle
//
// New makes a server over a backend; Adopt takes over the sandboxes an
// earlier run of the same instance left, each with a fresh idle window;
// Handler and Serve expose it over HTTP, RunStdio over a stdio transport
// (StdioTransport answers malformed lines and carries on);
// Close cancels calls in flight, removes the pools' ready sandboxes and
// keeps the others, unless Options.DeleteOnShutdown.
package server
