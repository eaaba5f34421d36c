package sbxd

import (
	"io/fs"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// The protocol's types live in internal/sbxdwire, which the agent (package
// sbxd/agent) links without this package; the names this package's API
// uses are re-exported here.

// ProtocolVersion is the wire protocol both ends speak. A client talks only
// to an agent that reports the same number in its hello; anything else is a
// stale agent, which the client replaces.
const ProtocolVersion = sbxdwire.ProtocolVersion

// Version is the agent's version string, as `sbxd serve` reports it (a
// copy of sbxdwire.Version, which is what the agent reports).
var Version = sbxdwire.Version

// EnvExecID is the marker every process of one command carries in its
// environment, so the agent can find and kill a whole tree, including
// children that left the process group. It is the same marker `sbxd exec`
// uses.
const EnvExecID = sbxdwire.EnvExecID

// ErrEditNoMatch: Edit's old string does not occur in the file.
var ErrEditNoMatch = sbxdwire.ErrEditNoMatch

// NotUniqueError: Edit's old string occurs Count times and ReplaceAll was
// not set (the uniqueness rule).
type NotUniqueError = sbxdwire.NotUniqueError

// JobRequest starts a background job.
type JobRequest = sbxdwire.JobRequest

// JobStatus describes a background job.
type JobStatus = sbxdwire.JobStatus

// Job states (JobStatus.State).
const (
	JobRunning = sbxdwire.JobRunning
	JobExited  = sbxdwire.JobExited
	// JobLost: the job's process is gone and no exit status was recorded
	// (the agent that watched it was killed).
	JobLost = sbxdwire.JobLost
)

// GrepRequest is one search (see Client.Grep).
type GrepRequest = sbxdwire.GrepRequest

// GrepFile is what one file with matches gave.
type GrepFile = sbxdwire.GrepFile

// GrepLine is a matching line, or a context line when Match is false. N is
// its 1-based number; Text has no line ending.
type GrepLine = sbxdwire.GrepLine

// TerminalStatus describes a terminal of the agent.
type TerminalStatus = sbxdwire.TerminalStatus

// fileInfoOf is a file's description from the wire.
func fileInfoOf(f sbxdwire.FileInfo) fs.FileInfo {
	return backend.NewFileInfo(f.Name, f.Size, f.Mode, time.Unix(0, f.MTime))
}
