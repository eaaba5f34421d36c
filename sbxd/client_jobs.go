package sbxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

func jsonBody(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(b), nil
}

// Background jobs run in the sandbox detached from any call: their output
// (stdout and stderr interleaved as written) is kept on disk, bounded to the
// most recent bytes, and read from a cursor. A job outlives the client and
// the agent that started it.

// StartJob starts req in the background. Stdin, Stdout, Stderr and Timeout
// of req are not used; outputLimit bounds the output kept (0: the agent's
// default, DefaultJobOutputLimit).
func (c *Client) StartJob(ctx context.Context, req backend.ExecRequest, outputLimit int64) (JobStatus, error) {
	argv, err := req.Argv()
	if err != nil {
		return JobStatus{}, c.opErr("job", err)
	}
	conn, err := c.agent(ctx)
	if err != nil {
		return JobStatus{}, err
	}
	if conn == nil {
		return JobStatus{}, c.noAgent("job")
	}
	if !c.userByAgent(conn, req.User) {
		return JobStatus{}, c.opErr("job", fmt.Errorf("%w: user %q: the sandbox's backend cannot run commands as another user (its Capabilities.User is false)", errors.ErrUnsupported, req.User))
	}
	var st JobStatus
	jr := JobRequest{Argv: argv, Env: req.Env, Dir: req.WorkDir, User: req.User, OutputLimit: outputLimit}
	if err := c.call(ctx, conn, sbxdwire.RouteJobs, jr, &st); err != nil {
		return JobStatus{}, c.opErr("job", err)
	}
	return st, nil
}

// Jobs lists the sandbox's background jobs, oldest first.
func (c *Client) Jobs(ctx context.Context) ([]JobStatus, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, c.noAgent("jobs")
	}
	var list []JobStatus
	if err := c.getJSON(ctx, conn, sbxdwire.RouteJobs, url.Values{}, &list); err != nil {
		return nil, c.opErr("jobs", err)
	}
	return list, nil
}

// Job returns one job's status. An unknown ID is an error wrapping
// fs.ErrNotExist.
func (c *Client) Job(ctx context.Context, id string) (JobStatus, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return JobStatus{}, err
	}
	if conn == nil {
		return JobStatus{}, c.noAgent("job")
	}
	var st JobStatus
	if err := c.getJSON(ctx, conn, sbxdwire.RouteJobs+"/"+url.PathEscape(id), url.Values{}, &st); err != nil {
		return JobStatus{}, c.pathErr("job", id, err)
	}
	return st, nil
}

// JobOutput is one read of a job's output.
type JobOutput struct {
	Data []byte
	// Next is the cursor to read on from.
	Next int64
	// Dropped counts bytes before the cursor asked for that are no longer
	// kept (the output limit keeps only the most recent bytes).
	Dropped int64
	// State is the job's state when the read was made: once it is not
	// JobRunning and Data is empty, the output is complete.
	State string
}

// ReadJobOutput reads up to max bytes (0: up to 4 MiB) of a job's output
// from cursor (0: the start).
func (c *Client) ReadJobOutput(ctx context.Context, id string, cursor, max int64) (JobOutput, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return JobOutput{}, err
	}
	if conn == nil {
		return JobOutput{}, c.noAgent("job")
	}
	q := url.Values{"cursor": {strconv.FormatInt(cursor, 10)}, "max": {strconv.FormatInt(max, 10)}}
	resp, err := c.get(ctx, conn, sbxdwire.RouteJobs+"/"+url.PathEscape(id)+"/output", q)
	if err != nil {
		return JobOutput{}, c.pathErr("job", id, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return JobOutput{}, c.opErr("job", conn.transportErr(ctx, err))
	}
	next, _ := strconv.ParseInt(resp.Header.Get(sbxdwire.HdrNextCursor), 10, 64)
	dropped, _ := strconv.ParseInt(resp.Header.Get(sbxdwire.HdrDropped), 10, 64)
	return JobOutput{Data: data, Next: next, Dropped: dropped, State: resp.Header.Get(sbxdwire.HdrJobState)}, nil
}

// WaitJob waits until the job ends or ctx is done, and returns its status.
func (c *Client) WaitJob(ctx context.Context, id string) (JobStatus, error) {
	for {
		st, err := c.jobCall(ctx, id, "wait", 30*time.Second)
		if err != nil || st.State != JobRunning {
			return st, err
		}
		if ctx.Err() != nil {
			return st, c.opErr("job", ctx.Err())
		}
	}
}

// KillJob kills a job's whole process tree and returns its status.
func (c *Client) KillJob(ctx context.Context, id string) (JobStatus, error) {
	return c.jobCall(ctx, id, "kill", 0)
}

func (c *Client) jobCall(ctx context.Context, id, verb string, timeout time.Duration) (JobStatus, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return JobStatus{}, err
	}
	if conn == nil {
		return JobStatus{}, c.noAgent("job")
	}
	u := agentURL + sbxdwire.RouteJobs + "/" + url.PathEscape(id) + "/" + verb
	if timeout > 0 {
		u += "?timeout_ms=" + strconv.FormatInt(timeout.Milliseconds(), 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return JobStatus{}, c.opErr("job", err)
	}
	var st JobStatus
	if err := conn.roundTrip(req, &st); err != nil {
		return JobStatus{}, c.pathErr("job", id, err)
	}
	return st, nil
}
