package fileopstest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/fileops"
)

func execute(t *testing.T, e *env, tools *fileops.Tools, command string, timeout time.Duration) fileops.ExecuteResult {
	t.Helper()
	res, err := tools.Execute(e.ctx, command, timeout)
	require.NoError(t, err)
	return res
}

var executeCases = []testCase{
	{"execute/output_and_exit_code", func(t *testing.T, e *env) {
		res := execute(t, e, e.tools, "echo hello", 0)
		assert.Equal(t, "hello\nExit code: 0", res.String())
		assert.Equal(t, "hello\n", res.Output)
		assert.Equal(t, 0, res.ExitCode)
		assert.Equal(t, fileops.DefaultExecuteTimeout, res.Timeout)

		res = execute(t, e, e.tools, "echo oops >&2; exit 3", 0)
		assert.Equal(t, "oops\nExit code: 3", res.String())
		assert.Equal(t, 3, res.ExitCode)
		assert.False(t, res.TimedOut)
	}},
	{"execute/interleaved", func(t *testing.T, e *env) {
		// Both streams land in one output. Their relative order is kept only
		// where the transport allows (Docker's exec stream may reorder them
		// on a loaded host), so only each stream's own order is asserted.
		res := execute(t, e, e.tools, "echo out1; echo err1 >&2; echo out2", 0)
		lines := strings.Split(strings.TrimSuffix(res.Output, "\n"), "\n")
		assert.ElementsMatch(t, []string{"out1", "err1", "out2"}, lines)
		assert.Less(t, strings.Index(res.Output, "out1"), strings.Index(res.Output, "out2"))
		assert.True(t, strings.HasSuffix(res.String(), "\nExit code: 0"), res.String())
	}},
	{"execute/no_output", func(t *testing.T, e *env) {
		assert.Equal(t, "Exit code: 0", execute(t, e, e.tools, "true", 0).String())
		assert.Equal(t, "abc\nExit code: 1", execute(t, e, e.tools, "printf abc; false", 0).String())
	}},
	{"execute/workdir", func(t *testing.T, e *env) {
		info, err := e.sb.Info(e.ctx)
		require.NoError(t, err)
		res := execute(t, e, e.tools, "pwd", 0)
		wd := strings.TrimSpace(res.Output)
		if info.WorkDir != "" {
			assert.Equal(t, info.WorkDir, wd)
		}
		// What execute makes there, the file tools see by relative path.
		name := e.inWorkDir()
		execute(t, e, e.tools, "echo made > "+name+"/f.txt", 0)
		out, err := e.tools.ReadFile(e.ctx, name+"/f.txt", 0, 0)
		require.NoError(t, err)
		assert.Equal(t, "     1\tmade", out)
	}},
	{"execute/timeout", func(t *testing.T, e *env) {
		start := time.Now()
		res := execute(t, e, e.tools, "echo before; sleep 30; echo after", 500*time.Millisecond)
		assert.Less(t, time.Since(start), 10*time.Second)
		assert.Equal(t, "before\nCommand timed out after 0.5 seconds\nExit code: 124", res.String())
		assert.True(t, res.TimedOut)
		assert.Equal(t, 124, res.ExitCode)

		tools := fileops.New(e.sb, fileops.Options{ExecuteTimeout: 2 * time.Second})
		res = execute(t, e, tools, "sleep 30", 0)
		assert.Equal(t, "Command timed out after 2 seconds\nExit code: 124", res.String())
	}},
	{"execute/truncated", func(t *testing.T, e *env) {
		tools := fileops.New(e.sb, fileops.Options{OutputLimit: 100})
		// 100 lines of 10 bytes.
		res := execute(t, e, tools, `i=0; while [ $i -lt 100 ]; do printf '%09d\n' $i; i=$((i+1)); done`, 0)
		assert.True(t, res.Truncated)
		assert.Equal(t, strings.Join([]string{
			"000000000", "000000001", "000000002", "000000003", "000000004",
			"[... output truncated: 900 bytes omitted ...]",
			"000000095", "000000096", "000000097", "000000098", "000000099",
			"Exit code: 0"}, "\n"), res.String())

		res = execute(t, e, tools, `i=0; while [ $i -lt 10 ]; do printf '%09d\n' $i; i=$((i+1)); done`, 0)
		assert.False(t, res.Truncated, "exactly the limit")
		assert.Len(t, res.Output, 100)
	}},
	{"execute/huge_output", func(t *testing.T, e *env) {
		tools := fileops.New(e.sb, fileops.Options{OutputLimit: 1000})
		res := execute(t, e, tools, `head -c 30000000 /dev/zero | tr '\0' x; echo; echo end`, 0)
		assert.True(t, res.Truncated)
		assert.Less(t, len(res.Output), 1100)
		assert.True(t, strings.HasSuffix(res.Output, "\nend\n"), "the tail is kept")
		assert.Contains(t, res.Output, "[... output truncated: 29999005 bytes omitted ...]")
	}},
	{"execute/bad_arguments", func(t *testing.T, e *env) {
		_, err := e.tools.Execute(e.ctx, "  ", 0)
		toolError(t, err, "Error: command is empty")
		_, err = e.tools.Execute(e.ctx, "true", -time.Second)
		toolError(t, err, "Error: timeout must not be negative (got -1s)")
	}},
	{"execute/context_cancelled", func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
		defer cancel()
		_, err := e.tools.Execute(ctx, "sleep 30", 0)
		require.Error(t, err)
		var te *fileops.ToolError
		assert.False(t, errors.As(err, &te), "a cancelled context is not the agent's problem")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}},
}
