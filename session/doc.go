// Package session launches sessions: the set of sandboxes one agent task
// needs, made from a config's [sandbox.sandboxes.NAME] entries and handled
// as one. Each entry picks an initializer (its type, default the entry's
// name; see package initializers) whose typed settings are decoded strictly
// from the entry's [extra] table.
//
// [Launcher.Launch] checks every entry before anything is made, creates the
// session's network and shared volumes where the backend has them (found
// through backend.AsBackend, so wrappers such as sbxd.WrapBackend are
// transparent; a backend without them, or one that answers
// errors.ErrUnsupported, gets a warning in Session.Warnings instead), starts
// the sandboxes concurrently, provisions them in dependency order and waits
// for each one's readiness probe with a deadline. When any step fails,
// everything already made is removed and the *Error names the sandbox, the
// step and the last lines of its output.
//
// A session's resources carry labels (backend.LabelSession and the ones
// here), so [Launcher.Resume] reattaches after a restart and [Destroy]
// removes a session by ID with nothing but the backend. [Session.Checkpoint]
// commits each sandbox to an image, saves the read-write session volumes
// (/shared, /bash_tools) as tar files and writes a [Manifest] that a later
// Launcher starts from, the volumes restored before anything is
// provisioned.
//
// This package imports no backend: the config's registry opens the backend
// (config.Config.Open), or the Launcher is handed one.
package session
