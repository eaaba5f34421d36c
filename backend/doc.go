// Package backend is the contract between sandboxkit and the places sandboxes
// live: a Docker engine, a Kubernetes cluster, an OpenSandbox deployment or
// plain host processes. It holds interfaces, value types and errors only; the
// implementations live in the backends/ packages and never import each other.
//
// # Lifecycle
//
// A [Backend] is opened once per program (each backend package has its own
// constructor taking a config struct, and a [Factory] that builds that
// struct from a config file) and closed with [Backend.Close], which releases
// connections but leaves sandboxes running.
//
//  1. [Backend.Create] turns a [Spec] into a running [Sandbox]. Before any
//     resource is made, the backend checks the spec against its
//     [Capabilities] (see [Capabilities.Check]): an option the backend cannot
//     honour is refused with an error wrapping [errors.ErrUnsupported] that
//     names the option, never silently ignored.
//  2. [Sandbox.Exec] runs commands. A non-zero exit status is data in
//     [ExecResult.ExitCode], not an error. A timeout kills the whole process
//     tree inside the sandbox and reports exit code 124 with
//     [ExecResult.TimedOut] set; cancelling the context kills it too and
//     returns the context's error.
//  3. [Backend.Get] reattaches to a sandbox by ID, for instance after the host
//     program restarted, and [Backend.List] finds sandboxes by label. Both work
//     from the backend's own records (container labels, pod labels, metadata
//     files): there is no local database to lose.
//  4. [Sandbox.Destroy] removes the sandbox and everything it made. It is
//     idempotent: destroying a sandbox that is already gone returns nil.
//
// # Optional capabilities
//
// The core interfaces are small. Everything else is an optional interface a
// sandbox (or backend) may implement. Sandboxes: [FileSystem] and [Archiver]
// for file transfer, [Attacher] for a bidirectional process stream,
// [AgentDialer] for an agent already listening, [Endpointer] for published
// ports, [Pauser], [Checkpointer], [Resetter], [Renewer] and [LogReader].
// Backends: [VolumeManager] and [NetworkManager].
//
// Wrappers (sbxd's client and WrapBackend, a logging layer) implement
// [Wrapper] or [BackendWrapper], and callers find capabilities only through
// [As] and [AsBackend], which walk the Unwrap chains: a wrapper implements an
// optional interface itself only where it changes the call, so what the
// helpers find is the truth. A sandbox or backend that has the interface but
// cannot serve a particular call returns an error wrapping
// [errors.ErrUnsupported], and callers treat that as not having it. Callers
// fall back to a generic path built on [Sandbox.Exec]: ReadFile, WriteFile
// and Stat in package backendkit/sbfiles do exactly that, the way
// io/fs.ReadFile prefers ReadFileFS and falls back to Open.
//
// # Factories
//
// Each backend package exports a [Factory]: how a config file's
// [sandbox.NAME] table becomes the backend's config and how the backend is
// opened, with what else of the file it may read ([Settings]). The config
// package decodes files through a registry of factories; sandboxkit's
// registry.go lists the built-in ones. docs/writing-a-backend.md walks
// through adding one.
//
// # Errors
//
// Backends report failures with the sentinels in this package ([ErrNotFound],
// [ErrAlreadyExists], [ErrUnavailable], [ErrInvalidConfig],
// [errors.ErrUnsupported]) wrapped in an [*OpError] that names the operation,
// backend and sandbox. File operations report [*fs.PathError] wrapping
// [fs.ErrNotExist], [fs.ErrExist] or [fs.ErrPermission]. Errors of the SDKs a
// backend uses (Docker, client-go, HTTP) are translated, never leaked, so
// errors.Is works the same on every backend.
//
// # Labels
//
// Every resource a backend makes carries the labels named by the Label*
// constants, so listing, reattaching, resuming after a crash and reaping
// expired or orphaned sandboxes (sbx gc) work from the backend alone.
package backend
