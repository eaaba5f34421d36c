package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// killedExitCode is a killed job's exit code (128 + SIGKILL), as a shell
// reports it.
const killedExitCode = 137

// jobState is a background job's state, whoever runs it.
type jobState struct {
	ID       string
	Running  bool
	ExitCode int
	// Lost: the job's process is gone and no exit status was recorded.
	Lost bool
	// Output counts the bytes the job has written in all.
	Output int64
}

// jobChunk is one read of a job's output.
type jobChunk struct {
	Data    []byte
	Next    int64
	Dropped int64
	State   jobState
}

// errJobNotFound is returned for an unknown job ID.
var errJobNotFound = errors.New("no such job")

// jobRunner runs background commands in one sandbox: through the sandbox's
// sbxd agent (jobs outlive the server), or, where no agent runs, in the
// server (jobs end with it). The tools print both the same way.
type jobRunner interface {
	start(ctx context.Context, command string) (jobState, error)
	status(ctx context.Context, id string) (jobState, error)
	output(ctx context.Context, id string, cursor, limit int64) (jobChunk, error)
	kill(ctx context.Context, id string) (jobState, error)
	// running reports whether a job is still running (which keeps the
	// sandbox from being idle).
	running(ctx context.Context) (bool, error)
	close()
}

// agentJobs are sbxd's jobs.
type agentJobs struct {
	c     *sbxd.Client
	limit int64
}

func fromAgent(st sbxd.JobStatus) jobState {
	return jobState{
		ID: st.ID, Running: st.State == sbxd.JobRunning, ExitCode: st.ExitCode,
		Lost: st.State == sbxd.JobLost, Output: st.Output,
	}
}

func agentErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errJobNotFound
	}
	return err
}

func (j *agentJobs) start(ctx context.Context, command string) (jobState, error) {
	st, err := j.c.StartJob(ctx, backend.ExecRequest{Shell: command}, j.limit)
	return fromAgent(st), err
}

func (j *agentJobs) status(ctx context.Context, id string) (jobState, error) {
	st, err := j.c.Job(ctx, id)
	return fromAgent(st), agentErr(err)
}

func (j *agentJobs) output(ctx context.Context, id string, cursor, limit int64) (jobChunk, error) {
	out, err := j.c.ReadJobOutput(ctx, id, cursor, limit)
	if err != nil {
		return jobChunk{}, agentErr(err)
	}
	// The state came with the read; the exit code needs the status.
	st := jobState{ID: id, Running: out.State == sbxd.JobRunning, Lost: out.State == sbxd.JobLost}
	if !st.Running {
		full, err := j.c.Job(ctx, id)
		if err != nil {
			return jobChunk{}, agentErr(err)
		}
		st = fromAgent(full)
	}
	return jobChunk{Data: out.Data, Next: out.Next, Dropped: out.Dropped, State: st}, nil
}

func (j *agentJobs) kill(ctx context.Context, id string) (jobState, error) {
	st, err := j.c.KillJob(ctx, id)
	return fromAgent(st), agentErr(err)
}

func (j *agentJobs) running(ctx context.Context) (bool, error) {
	list, err := j.c.Jobs(ctx)
	if err != nil {
		return false, err
	}
	for _, st := range list {
		if st.State == sbxd.JobRunning {
			return true, nil
		}
	}
	return false, nil
}

func (j *agentJobs) close() {}

// localJobs run commands with the sandbox's Exec from goroutines of the
// server, keeping about the most recent limit bytes of each job's output.
type localJobs struct {
	sb    backend.Sandbox
	limit int64
	life  context.Context

	mu   sync.Mutex
	next int
	jobs map[string]*localJob
	wg   sync.WaitGroup
}

type localJob struct {
	id     string
	limit  int64
	cancel context.CancelFunc
	done   chan struct{} // closed when the command has ended

	mu       sync.Mutex
	buf      []byte // the most recent output; buf[0] is at offset base
	base     int64
	total    int64
	running  bool
	exitCode int
}

func newLocalJobs(life context.Context, sb backend.Sandbox, limit int64) *localJobs {
	return &localJobs{sb: sb, limit: limit, life: life, jobs: map[string]*localJob{}}
}

// Write keeps output, dropping the oldest bytes once twice the limit is
// held (so compaction is amortised and at least limit bytes stay).
func (j *localJob) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.append(p)
	return len(p), nil
}

// append adds p to the output. Called with j.mu held.
func (j *localJob) append(p []byte) {
	j.total += int64(len(p))
	j.buf = append(j.buf, p...)
	if j.limit > 0 && int64(len(j.buf)) >= 2*j.limit {
		extra := int64(len(j.buf)) - j.limit
		j.buf = j.buf[:copy(j.buf, j.buf[extra:])]
		j.base += extra
	}
}

func (j *localJob) state() jobState {
	j.mu.Lock()
	defer j.mu.Unlock()
	return jobState{ID: j.id, Running: j.running, ExitCode: j.exitCode, Output: j.total}
}

func (l *localJobs) start(_ context.Context, command string) (jobState, error) {
	l.mu.Lock()
	if l.life.Err() != nil {
		l.mu.Unlock()
		return jobState{}, fmt.Errorf("the server is shutting down: %w", l.life.Err())
	}
	l.next++
	ctx, cancel := context.WithCancel(l.life)
	j := &localJob{id: "job-" + strconv.Itoa(l.next), limit: l.limit, cancel: cancel, done: make(chan struct{}), running: true}
	l.jobs[j.id] = j
	l.wg.Add(1)
	l.mu.Unlock()

	go func() {
		defer l.wg.Done()
		defer close(j.done)
		defer cancel()
		res, err := l.sb.Exec(ctx, backend.ExecRequest{Shell: command, Stdout: j, Stderr: j})
		j.mu.Lock()
		defer j.mu.Unlock()
		j.running = false
		j.exitCode = res.ExitCode
		switch {
		case err != nil && ctx.Err() != nil:
			j.exitCode = killedExitCode
		case err != nil:
			j.append(fmt.Appendf(nil, "\n[job failed: %v]\n", err))
			j.exitCode = -1
		}
	}()
	return j.state(), nil
}

func (l *localJobs) get(id string) (*localJob, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j, ok := l.jobs[id]
	if !ok {
		return nil, errJobNotFound
	}
	return j, nil
}

func (l *localJobs) status(_ context.Context, id string) (jobState, error) {
	j, err := l.get(id)
	if err != nil {
		return jobState{}, err
	}
	return j.state(), nil
}

func (l *localJobs) output(_ context.Context, id string, cursor, limit int64) (jobChunk, error) {
	j, err := l.get(id)
	if err != nil {
		return jobChunk{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	c := jobChunk{State: jobState{ID: j.id, Running: j.running, ExitCode: j.exitCode, Output: j.total}}
	start := min(max(cursor, j.base), j.total)
	if cursor < j.base {
		c.Dropped = j.base - cursor
	}
	end := j.total
	if limit > 0 {
		end = min(end, start+limit)
	}
	c.Data = append([]byte(nil), j.buf[start-j.base:end-j.base]...)
	c.Next = end
	return c, nil
}

func (l *localJobs) kill(ctx context.Context, id string) (jobState, error) {
	j, err := l.get(id)
	if err != nil {
		return jobState{}, err
	}
	j.cancel()
	// Exec returns once the command's process tree is gone.
	select {
	case <-j.done:
	case <-ctx.Done():
		return j.state(), ctx.Err()
	}
	return j.state(), nil
}

func (l *localJobs) running(context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, j := range l.jobs {
		if j.state().Running {
			return true, nil
		}
	}
	return false, nil
}

func (l *localJobs) close() {
	l.mu.Lock()
	for _, j := range l.jobs {
		j.cancel()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
