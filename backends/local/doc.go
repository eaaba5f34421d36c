// Package local is the sandboxkit backend that runs sandboxes as plain host
// processes. It needs no daemon, which makes it the default for trying
// sandboxkit and for tests, but it gives NO isolation: a command in a local
// sandbox can read and change anything the host user can. Its Capabilities
// say so (IsolationNone), and options that need isolation (resource limits,
// volumes, ports, privileges, networks) are refused at Create.
//
// # Sandboxes
//
// Each sandbox is a directory under the state dir (Config.StateDir, default
// $XDG_STATE_HOME/sandboxkit/local, else ~/.local/state/sandboxkit/local):
//
//	<state>/<id>/meta.json   what Get and List read; written atomically
//	<state>/<id>/work/       the sandbox's default working directory
//
// so any number of sandboxes can exist at once and they survive a restart of
// the host program. Spec.Image is recorded but not used (there are no
// images); a warning is logged.
//
// # Paths
//
// Exec and file operations agree on what a path means: an absolute path is
// the host path of the same name, and a relative path resolves against the
// sandbox's working directory (Info.WorkDir). Nothing confines file access to
// the sandbox directory; that would promise an isolation Exec cannot give.
//
// # Processes
//
// Every command runs in its own process group, and every process a sandbox
// starts carries SANDBOXKIT_SANDBOX_ID (and, per command, SANDBOXKIT_EXEC_ID)
// in its environment. A timeout or a cancelled context kills the process
// group and then every process still carrying the command's marker (so
// children that called setsid die too); Destroy kills every process carrying
// the sandbox's marker, including background servers and the entry's
// command, before it removes the directory.
package local
