package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/fileops"
)

// The tools commands run the fileops tools exactly as an agent does and
// print the text the agent would get. A tool's own failure (file not found,
// old string not unique, ...) is that text too: it goes to stdout and sbx
// exits 1. Failures of sbx itself go to stderr as usual.
func (a *app) toolsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "Use the agent tools (ls, read, write, edit, glob, grep, execute) on a sandbox",
	}
	cmd.AddCommand(
		a.toolCmd("ls ID|NAME [PATH]", "List a directory", 1, 2,
			func(ctx context.Context, t *fileops.Tools, args []string) (string, error) {
				p := "" // the tool's default
				if len(args) > 1 {
					p = args[1]
				}
				return t.Ls(ctx, p)
			}, nil),
		a.readCmd(),
		a.writeCmd(),
		a.editCmd(),
		a.globCmd(),
		a.grepCmd(),
		a.executeCmd(),
	)
	return cmd
}

type toolFunc func(ctx context.Context, t *fileops.Tools, args []string) (string, error)

// toolCmd makes a tools subcommand taking the sandbox and then between
// minArgs-1 and maxArgs-1 more arguments (maxArgs < 0: any number).
func (a *app) toolCmd(use, short string, minArgs, maxArgs int, fn toolFunc, flags func(*cobra.Command)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < minArgs || (maxArgs >= 0 && len(args) > maxArgs) {
				return usageError(cmd, "want %s", strings.TrimPrefix(cmd.Use, cmd.Name()+" "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.tool(cmd.Context(), args, fn)
		},
	}
	if flags != nil {
		flags(cmd)
	}
	return cmd
}

func (a *app) tool(ctx context.Context, args []string, fn toolFunc) error {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	sb, err := resolve(ctx, b, args[0])
	if err != nil {
		return err
	}
	tools := fileops.New(sb, fileops.Options{ExecuteTimeout: cfg.Sandbox.ExecuteTimeout})
	out, err := fn(ctx, tools, args)
	if te, ok := errors.AsType[*fileops.ToolError](err); ok {
		a.printToolText(te.Error())
		return &exitCode{exitError}
	}
	if err != nil {
		return err
	}
	a.printToolText(out)
	return nil
}

// printToolText prints what the agent gets, ending it with a newline for
// the terminal's sake.
func (a *app) printToolText(s string) {
	io.WriteString(a.stdout, s)
	if !strings.HasSuffix(s, "\n") {
		io.WriteString(a.stdout, "\n")
	}
}

func (a *app) readCmd() *cobra.Command {
	var offset, limit int
	return a.toolCmd("read ID|NAME PATH", "Read a file, cat -n style", 2, 2,
		func(ctx context.Context, t *fileops.Tools, args []string) (string, error) {
			return t.ReadFile(ctx, args[1], offset, limit)
		},
		func(cmd *cobra.Command) {
			cmd.Flags().IntVar(&offset, "offset", 0, "lines to skip")
			cmd.Flags().IntVar(&limit, "limit", fileops.DefaultReadLimit, "lines to read")
		})
}

func (a *app) writeCmd() *cobra.Command {
	var content string
	var contentSet bool
	return a.toolCmd("write ID|NAME PATH", "Create a file (content from --content or stdin)", 2, 2,
		func(ctx context.Context, t *fileops.Tools, args []string) (string, error) {
			if !contentSet {
				data, err := io.ReadAll(a.stdin)
				if err != nil {
					return "", fmt.Errorf("reading content from stdin: %w", err)
				}
				content = string(data)
			}
			return t.WriteFile(ctx, args[1], content)
		},
		func(cmd *cobra.Command) {
			cmd.Flags().StringVar(&content, "content", "", "the file's content (default: read stdin)")
			cmd.PreRun = func(cmd *cobra.Command, args []string) {
				contentSet = cmd.Flags().Changed("content")
			}
		})
}

func (a *app) editCmd() *cobra.Command {
	var oldS, newS string
	var all bool
	return a.toolCmd("edit ID|NAME PATH --old TEXT --new TEXT", "Replace text in a file", 2, 2,
		func(ctx context.Context, t *fileops.Tools, args []string) (string, error) {
			return t.EditFile(ctx, args[1], oldS, newS, all)
		},
		func(cmd *cobra.Command) {
			cmd.Flags().StringVar(&oldS, "old", "", "exact text to replace")
			cmd.Flags().StringVar(&newS, "new", "", "replacement text")
			cmd.Flags().BoolVar(&all, "replace-all", false, "replace every occurrence")
			_ = cmd.MarkFlagRequired("old")
			_ = cmd.MarkFlagRequired("new")
		})
}

func (a *app) globCmd() *cobra.Command {
	var dir string
	return a.toolCmd("glob ID|NAME PATTERN", "Find files by pattern (** allowed), newest first", 2, 2,
		func(ctx context.Context, t *fileops.Tools, args []string) (string, error) {
			return t.Glob(ctx, args[1], dir)
		},
		func(cmd *cobra.Command) {
			cmd.Flags().StringVar(&dir, "path", "", `directory to search (default "/")`)
		})
}

func (a *app) grepCmd() *cobra.Command {
	var req fileops.GrepRequest
	var mode string
	return a.toolCmd("grep ID|NAME PATTERN", "Search file contents (RE2 regex)", 2, 2,
		func(ctx context.Context, t *fileops.Tools, args []string) (string, error) {
			req.Pattern = args[1]
			req.Mode = fileops.GrepMode(mode)
			return t.Grep(ctx, req)
		},
		func(cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&req.Path, "path", "", `file or directory to search (default ".")`)
			f.StringVar(&req.Glob, "glob", "", "only files matching this pattern")
			f.StringVar(&mode, "mode", string(fileops.GrepFilesWithMatches), "files_with_matches, content or count")
			f.IntVarP(&req.After, "after", "A", 0, "lines of context after each match (content mode)")
			f.IntVarP(&req.Before, "before", "B", 0, "lines of context before each match (content mode)")
			f.IntVarP(&req.Context, "context", "C", 0, "lines of context around each match (content mode)")
			f.BoolVar(&req.Literal, "literal", false, "PATTERN is plain text, not a regex")
			f.BoolVarP(&req.IgnoreCase, "ignore-case", "i", false, "ignore case")
		})
}

func (a *app) executeCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "execute ID|NAME COMMAND...",
		Short: "Run a shell command and print its combined output and exit code",
		Long: `Execute runs COMMAND (the remaining arguments joined by spaces) with sh -c,
as the agent tool does, prints what the agent gets and exits with the
command's exit code (124 after a timeout).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(splitCommand(args[min(1, len(args)):])) == 0 {
				return usageError(cmd, "want ID|NAME COMMAND")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTimeout(cmd, timeout); err != nil {
				return err
			}
			var code int
			err := a.tool(cmd.Context(), args, func(ctx context.Context, t *fileops.Tools, args []string) (string, error) {
				res, err := t.Execute(ctx, strings.Join(splitCommand(args[1:]), " "), timeout)
				code = res.ExitCode
				return res.String(), err
			})
			if err == nil && code != 0 {
				return &exitCode{code}
			}
			return err
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "kill the command after this long (default: the config's execute timeout)")
	return cmd
}
