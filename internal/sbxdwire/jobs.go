package sbxdwire

import "time"

// JobRequest starts a background job (POST RouteJobs).
type JobRequest struct {
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env,omitempty"`
	Dir  string            `json:"dir,omitempty"`
	User string            `json:"user,omitempty"`
	// OutputLimit bounds the output kept on disk: the most recent
	// OutputLimit bytes (roughly; at least half of it) are kept. 0: the
	// agent's default.
	OutputLimit int64 `json:"output_limit,omitempty"`
}

// Job states.
const (
	JobRunning = "running"
	JobExited  = "exited"
	// JobLost: the job's process is gone and no exit status was recorded
	// (the agent that watched it was killed).
	JobLost = "lost"
)

// JobStatus describes a background job.
type JobStatus struct {
	ID       string    `json:"id"`
	Argv     []string  `json:"argv"`
	PID      int       `json:"pid"`
	State    string    `json:"state"`
	ExitCode int       `json:"exit_code"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	// Output is how many bytes of output the job has written in all.
	Output int64 `json:"output"`
}
