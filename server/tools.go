package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/fileops"
)

// Result is what a tool call returns: the text the agent reads and whether
// it reports a failure. HTTP callers also get the sandbox, job or terminal
// ID a call made or used.
type Result struct {
	Output     string `json:"output"`
	IsError    bool   `json:"is_error"`
	SandboxID  string `json:"sandbox_id,omitempty"`
	JobID      string `json:"job_id,omitempty"`
	TerminalID string `json:"terminal_id,omitempty"`
}

// Tool inputs. The json names are what agents send; jsonschema tags
// describe them to the model.
type (
	CreateInput struct {
		Type           string `json:"type,omitempty" jsonschema:"sandbox type, one of the configured entries; default main"`
		TimeoutMinutes int    `json:"timeout_minutes,omitempty" jsonschema:"minutes the sandbox lives without tool calls before it is removed; default 30"`
	}
	SandboxInput struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned earlier in this conversation"`
	}
	ListInput struct{}
	LsInput   struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		Path      string `json:"path,omitempty" jsonschema:"directory to list; default the working directory"`
	}
	ReadInput struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		Path      string `json:"path" jsonschema:"file to read"`
		Offset    int    `json:"offset,omitempty" jsonschema:"lines to skip; default 0"`
		Limit     int    `json:"limit,omitempty" jsonschema:"lines to print; default 2000"`
	}
	WriteInput struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		Path      string `json:"path" jsonschema:"file to create (never replaces an existing file)"`
		Content   string `json:"content" jsonschema:"the file's text"`
	}
	EditInput struct {
		SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		Path       string `json:"path" jsonschema:"file to edit"`
		OldString  string `json:"old_string" jsonschema:"exact text to replace, unique in the file unless replace_all"`
		NewString  string `json:"new_string" jsonschema:"replacement text"`
		ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence"`
	}
	GlobInput struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		Pattern   string `json:"pattern" jsonschema:"glob pattern such as **/*.go"`
		Path      string `json:"path,omitempty" jsonschema:"directory to search; default the working directory"`
	}
	GrepInput struct {
		SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		Pattern    string `json:"pattern" jsonschema:"RE2 regular expression (or text with literal)"`
		Path       string `json:"path,omitempty" jsonschema:"file or directory to search; default the working directory"`
		Glob       string `json:"glob,omitempty" jsonschema:"only files matching this glob, e.g. *.py"`
		Mode       string `json:"mode,omitempty" jsonschema:"files_with_matches (default), content or count"`
		Before     int    `json:"-B,omitempty" jsonschema:"lines of context before each match (content mode)"`
		After      int    `json:"-A,omitempty" jsonschema:"lines of context after each match (content mode)"`
		Context    int    `json:"-C,omitempty" jsonschema:"lines of context around each match (content mode)"`
		Literal    bool   `json:"literal,omitempty" jsonschema:"match the pattern as plain text"`
		IgnoreCase bool   `json:"ignore_case,omitempty" jsonschema:"match case-insensitively"`
	}
	ExecuteInput struct {
		SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		Command    string `json:"command" jsonschema:"shell command, run with sh -c in the working directory"`
		Timeout    int    `json:"timeout,omitempty" jsonschema:"seconds before the command is killed (exit code 124); default 1800; not used with background"`
		Background bool   `json:"background,omitempty" jsonschema:"start the command in the background and return a job_id at once"`
	}
	JobInput struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		JobID     string `json:"job_id" jsonschema:"the job_id execute with background=true returned"`
	}
	JobOutputInput struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		JobID     string `json:"job_id" jsonschema:"the job_id execute with background=true returned"`
		Cursor    int64  `json:"cursor,omitempty" jsonschema:"where to read on from: the cursor the previous job_output call returned; default 0"`
	}
)

// toolDef is one tool: its name, what the model is told, and the call.
type toolDef struct {
	name, description string
	// register adds the tool to an MCP server (see mcp.go); http decodes
	// and runs an HTTP call (see http.go). Both come from defineTool.
	register func(*mcpRegistrar)
	http     func(ctx context.Context, s *Server, conv string, body []byte) (Result, error)
	schema   func() (any, error)
}

const sandboxIDHint = " Pass the sandbox_id from create_sandbox (or from earlier in this conversation)."

// tools lists every tool, in the order agents see them.
func tools() []toolDef {
	return slices.Concat(sandboxTools(), fileTools(), execTools(), terminalTools())
}

// sandboxTools make, find and remove a conversation's sandboxes.
func sandboxTools() []toolDef {
	return []toolDef{
		defineTool("create_sandbox",
			"Create a sandbox to run commands and edit files in. Call this FIRST, before any other tool, "+
				"unless this conversation already has a sandbox_id (then call connect_sandbox with it). Returns the sandbox_id every other tool needs. "+
				"The sandbox is removed after timeout_minutes without tool calls (default 30); every tool call renews it.",
			func(ctx context.Context, s *Server, conv string, in CreateInput) (Result, error) {
				info, err := s.Create(ctx, conv, in.Type, time.Duration(in.TimeoutMinutes)*time.Minute)
				if err != nil {
					return Result{}, err
				}
				return Result{Output: fmt.Sprintf("Created sandbox %s (type %s, isolation %s: %s).\n%s\nUse sandbox_id=%s in every other tool call.",
					info.ID, info.Type, info.Isolation, isolationMeaning(info.Isolation), s.ttlText(info), info.ID), SandboxID: info.ID}, nil
			}),
		defineTool("connect_sandbox",
			"Reconnect to a sandbox created earlier in this conversation and renew its time to live. Use it when you resume "+
				"work with a sandbox_id from earlier messages; if the sandbox is gone, call create_sandbox.",
			func(ctx context.Context, s *Server, conv string, in SandboxInput) (Result, error) {
				info, err := s.Connect(ctx, conv, in.SandboxID)
				if err != nil {
					return Result{}, err
				}
				return Result{Output: fmt.Sprintf("Connected to sandbox %s (type %s).\n%s", info.ID, info.Type, s.ttlText(info)),
					SandboxID: info.ID}, nil
			}),
		defineTool("list_sandboxes", "List this conversation's sandboxes with their types and expiry times.",
			func(ctx context.Context, s *Server, conv string, _ ListInput) (Result, error) {
				list, err := s.List(ctx, conv)
				if err != nil {
					return Result{}, err
				}
				if len(list) == 0 {
					return Result{Output: "This conversation has no sandboxes. Call create_sandbox to make one."}, nil
				}
				var b strings.Builder
				for i, info := range list {
					if i > 0 {
						b.WriteByte('\n')
					}
					fmt.Fprintf(&b, "%s  type=%s  expires=%s", info.ID, info.Type, info.ExpiresAt.UTC().Format(time.RFC3339))
				}
				return Result{Output: b.String()}, nil
			}),
		defineTool("delete_sandbox", "Delete a sandbox and everything in it, when the work is done."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in SandboxInput) (Result, error) {
				if err := s.Delete(ctx, conv, in.SandboxID); err != nil {
					return Result{}, err
				}
				return Result{Output: fmt.Sprintf("Deleted sandbox %s.", in.SandboxID), SandboxID: in.SandboxID}, nil
			}),
	}
}

// fileTools are fileops' file tools.
func fileTools() []toolDef {
	return []toolDef{
		defineTool("ls", "List a directory in the sandbox: type, size, modification time and name per entry."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in LsInput) (Result, error) {
				return s.tool(ctx, conv, in.SandboxID, func(ctx context.Context, t *fileops.Tools) (string, error) {
					return t.Ls(ctx, in.Path)
				})
			}),
		defineTool("read_file", "Read a text file in the sandbox, with line numbers (cat -n style); page with offset and limit."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in ReadInput) (Result, error) {
				return s.tool(ctx, conv, in.SandboxID, func(ctx context.Context, t *fileops.Tools) (string, error) {
					return t.ReadFile(ctx, in.Path, in.Offset, in.Limit)
				})
			}),
		defineTool("write_file", "Create a new file in the sandbox (parent directories too). It never replaces a file: use edit_file for that."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in WriteInput) (Result, error) {
				return s.tool(ctx, conv, in.SandboxID, func(ctx context.Context, t *fileops.Tools) (string, error) {
					return t.WriteFile(ctx, in.Path, in.Content)
				})
			}),
		defineTool("edit_file", "Replace exact text in a file in the sandbox: old_string must be unique unless replace_all is set."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in EditInput) (Result, error) {
				return s.tool(ctx, conv, in.SandboxID, func(ctx context.Context, t *fileops.Tools) (string, error) {
					return t.EditFile(ctx, in.Path, in.OldString, in.NewString, in.ReplaceAll)
				})
			}),
		defineTool("glob", "Find files in the sandbox by glob pattern (** for any depth), most recently modified first."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in GlobInput) (Result, error) {
				return s.tool(ctx, conv, in.SandboxID, func(ctx context.Context, t *fileops.Tools) (string, error) {
					return t.Glob(ctx, in.Pattern, cmp.Or(in.Path, ".")) // the working directory, not fileops' "/"
				})
			}),
		defineTool("grep", "Search file contents in the sandbox with a regular expression."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in GrepInput) (Result, error) {
				return s.tool(ctx, conv, in.SandboxID, func(ctx context.Context, t *fileops.Tools) (string, error) {
					return t.Grep(ctx, fileops.GrepRequest{
						Pattern: in.Pattern, Path: in.Path, Glob: in.Glob, Mode: fileops.GrepMode(in.Mode),
						Before: in.Before, After: in.After, Context: in.Context, Literal: in.Literal, IgnoreCase: in.IgnoreCase,
					})
				})
			}),
	}
}

// execTools run commands, in the foreground or as background jobs.
func execTools() []toolDef {
	return []toolDef{
		defineTool("execute",
			"Run a shell command in the sandbox and return its output and exit code (124 after a timeout). "+
				"With background=true it returns a job_id at once: follow it with job_status, job_output and job_kill. "+
				"Call create_sandbox first."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in ExecuteInput) (Result, error) {
				if in.Background {
					return s.startJob(ctx, conv, in)
				}
				return s.tool(ctx, conv, in.SandboxID, func(ctx context.Context, t *fileops.Tools) (string, error) {
					if in.Timeout < 0 {
						return "", toolError("timeout must not be negative (got %d)", in.Timeout)
					}
					start := time.Now()
					res, err := t.Execute(ctx, inOrder(in.Command), time.Duration(in.Timeout)*time.Second)
					if err != nil {
						return "", err
					}
					s.metrics.execTime.WithLabelValues("tool").Observe(time.Since(start).Seconds())
					noteAudit(ctx, func(e *AuditEntry) { e.ExitCode = &res.ExitCode })
					return res.String(), nil
				})
			}),
		defineTool("job_status", "Show whether a background job (from execute with background=true) is running, and its exit code when done."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in JobInput) (Result, error) {
				return s.jobCall(ctx, conv, in.SandboxID, in.JobID, func(ctx context.Context, j jobRunner) (string, error) {
					st, err := j.status(ctx, in.JobID)
					return jobStateText(st), err
				})
			}),
		defineTool("job_output", "Read a background job's output from cursor (0 at first); the answer ends with the cursor to pass next time."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in JobOutputInput) (Result, error) {
				return s.jobCall(ctx, conv, in.SandboxID, in.JobID, func(ctx context.Context, j jobRunner) (string, error) {
					if in.Cursor < 0 {
						return "", toolError("cursor must not be negative (got %d)", in.Cursor)
					}
					c, err := j.output(ctx, in.JobID, in.Cursor, s.opts.OutputLimit)
					if err != nil {
						return "", err
					}
					return s.jobOutputText(c), nil
				})
			}),
		defineTool("job_kill", "Kill a background job and everything it started."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in JobInput) (Result, error) {
				return s.jobCall(ctx, conv, in.SandboxID, in.JobID, func(ctx context.Context, j jobRunner) (string, error) {
					st, err := j.kill(ctx, in.JobID)
					return jobStateText(st), err
				})
			}),
	}
}

// ttlText tells the agent when its sandbox expires.
func (s *Server) ttlText(info SandboxInfo) string {
	t := fmt.Sprintf("It is removed after %s without tool calls (every tool call renews it; now until %s)",
		fmtDuration(info.IdleTTL), info.ExpiresAt.UTC().Format(time.RFC3339))
	if !info.HardDeadline.IsZero() {
		t += fmt.Sprintf(", and at %s at the latest", info.HardDeadline.UTC().Format(time.RFC3339))
	}
	return t + "."
}

// fmtDuration prints 30m0s as "30 minutes".
func fmtDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return plural(int(d/time.Minute), "minute")
	}
	return plural(int(d/time.Second), "second")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// tool runs a fileops tool on conv's sandbox id.
func (s *Server) tool(ctx context.Context, conv, id string, fn func(context.Context, *fileops.Tools) (string, error)) (Result, error) {
	var out string
	err := s.withBox(ctx, conv, id, func(ctx context.Context, b *box) error {
		var err error
		out, err = fn(ctx, b.tools)
		return err
	})
	return Result{Output: out}, err
}

func (s *Server) startJob(ctx context.Context, conv string, in ExecuteInput) (Result, error) {
	if strings.TrimSpace(in.Command) == "" {
		return Result{}, toolError("command is empty")
	}
	var st jobState
	err := s.withBox(ctx, conv, in.SandboxID, func(ctx context.Context, b *box) error {
		var err error
		st, err = b.jobs.start(ctx, inOrder(in.Command))
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Output: fmt.Sprintf("Started background job %s.\nFollow it with job_status, job_output (cursor=0 first) and job_kill, passing job_id=%s.",
		st.ID, st.ID), JobID: st.ID}, nil
}

func (s *Server) jobCall(ctx context.Context, conv, id, jobID string, fn func(context.Context, jobRunner) (string, error)) (Result, error) {
	if jobID == "" {
		return Result{}, toolError("job_id is empty: pass the job_id execute with background=true returned")
	}
	var out string
	err := s.withBox(ctx, conv, id, func(ctx context.Context, b *box) error {
		var err error
		out, err = fn(ctx, b.jobs)
		if errors.Is(err, errJobNotFound) {
			return toolError("Job '%s' not found in sandbox '%s'.", jobID, id)
		}
		return err
	})
	return Result{Output: out, JobID: jobID}, err
}

func jobStateText(st jobState) string {
	switch {
	case st.Running:
		return fmt.Sprintf("Job %s is running (%d bytes of output so far).", st.ID, st.Output)
	case st.Lost:
		return fmt.Sprintf("Job %s is gone: its process ended without an exit status.", st.ID)
	}
	return fmt.Sprintf("Job %s has finished.\nExit code: %d", st.ID, st.ExitCode)
}

func (s *Server) jobOutputText(c jobChunk) string {
	var b strings.Builder
	if c.Dropped > 0 {
		fmt.Fprintf(&b, "[... %d bytes of earlier output no longer kept ...]\n", c.Dropped)
	}
	out := strings.ToValidUTF8(string(c.Data), "\uFFFD")
	b.WriteString(out)
	if out != "" && !strings.HasSuffix(out, "\n") {
		b.WriteByte('\n')
	}
	full := int64(len(c.Data)) >= s.opts.OutputLimit
	switch {
	case c.State.Running || full:
		fmt.Fprintf(&b, "[job %s %s; more output may follow: call job_output with cursor=%d]", c.State.ID,
			map[bool]string{true: "is running", false: "has finished"}[c.State.Running], c.Next)
	case c.State.Lost:
		fmt.Fprintf(&b, "[job %s is gone; this is all its output (cursor=%d)]", c.State.ID, c.Next)
	default:
		fmt.Fprintf(&b, "[job %s has finished with exit code %d; this is all its output (cursor=%d)]", c.State.ID, c.State.ExitCode, c.Next)
	}
	return b.String()
}
