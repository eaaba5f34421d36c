// Package fileops gives AI agents their tools over any sandbox: ls,
// read_file, write_file, edit_file, glob, grep and execute. The text each
// tool returns is what the agent reads, verbatim, whether it comes through
// a library call, `sbx tools` or an MCP server, so it is specified here and
// tested on every backend (see the fileopstest package).
//
// # Paths and results
//
// Paths are sandbox paths. A relative path resolves against the sandbox's
// working directory (Info.WorkDir), as it does for Exec. Tools that find
// files (Glob, Grep) print absolute paths; tools that act on one path echo it
// as given.
//
// A tool returns the agent's text and a nil error, or an error. A
// [*ToolError] is a problem the agent can act on (a missing file, an
// ambiguous edit, a bad argument): its Error method returns the exact text
// to show the agent, always starting with "Error: ", and it unwraps to the
// cause where there is one, so errors.Is(err, fs.ErrNotExist) works. Any
// other error is an infrastructure failure (the backend cannot be reached,
// the context was cancelled) and is returned as the backend reported it.
//
// # Formats
//
// ls(path) lists a directory sorted by name, one entry a line:
//
//	dir              -  2024-05-01T12:00:00Z  src/
//	file          1234  2024-05-01T12:00:00Z  main.go
//	symlink         11  2024-05-01T12:00:00Z  latest
//
// formatted "%-7s %10s  %s  %s": the type (dir, file, symlink, fifo,
// socket, device, other), the size in bytes ("-" for directories), the
// modification time in UTC (RFC 3339) and the name, with a trailing "/" for
// directories. Symlinks are not followed. A name that holds a control
// character (a newline, a tab, ...) or invalid UTF-8, or starts with a
// double quote, is printed as a Go string literal ("a\nb"), here and in
// the paths glob and grep print, so every entry is one line and no name
// can pass for other entries. An empty directory gives
// "Directory '<path>' is empty."; a missing path "Error: Path not found:
// '<path>'"; a file "Error: '<path>' is not a directory. Use read_file to
// read a file.". At most [MaxResults] entries are printed, then a line
// "[N more entries not shown; the listing is cut at 1000]".
//
// read_file(path, offset=0, limit=2000) prints lines offset+1 to
// offset+limit like cat -n: each line is "%6d\t<line>" with its 1-based
// number, lines joined by "\n" with no trailing newline, line endings ("\n"
// or "\r\n") removed:
//
//	"     1\tpackage main"
//	"     2\t"
//	"     3\tfunc main() {}"
//
// A line longer than [MaxLineLength] (5000) characters is split into pieces
// of 5000 characters numbered "N.1", "N.2", ..., right-aligned in the same
// six columns ("  12.1\t..."). When lines remain after the last one printed,
// a final line "[showing lines A-B; more lines follow: pass offset=B to read
// on]" says so. The whole answer, numbers and notes included, is at most
// [MaxReadOutput] (1 MiB); a longer one ends early with a line "[output
// cut at 1 MiB after line N; pass offset=N to read on]", or, when the first
// line printed (or a line of more than one piece) does not fit, with the
// pieces that do and "[output cut at 1 MiB inside line N; ...]". Other
// answers:
//
//	File '<path>' exists but is empty.                          (no error)
//	Error: File not found: '<path>'
//	Error: '<path>' is a directory, not a file. Use ls to list it.
//	Error: '<path>' is a binary file; read_file shows text files only.
//	Error: Line offset 10 is past the end of '<path>' (the file has 3 lines).
//	Error: '<path>' is a named pipe, not a regular file; the file tools read regular files only.
//	Error: '<path>': too many levels of symbolic links (a symlink loop).
//
// Only regular files are read (symlinks followed): a named pipe, socket or
// device ("named pipe", "socket", "device") is refused at once, on every
// backend, since reading one could block or never end. Files in /proc,
// which report a size of 0, are read to their end.
//
// A file is binary when its first 8 KiB hold a NUL byte or are more than a
// tenth invalid UTF-8 or control characters (other than tab, newlines, form
// feed, vertical tab, backspace and escape). Invalid UTF-8 in a text file is
// shown as U+FFFD. The file is streamed, not loaded whole.
//
// write_file(path, content) creates a file (mode 0644) and its missing
// parent directories, and answers "Created file '<path>' (N bytes).". It
// never replaces a file: "Error: File already exists: '<path>'. Use
// edit_file to change an existing file.".
//
// edit_file(path, old_string, new_string, replace_all=false) replaces the
// exact text old_string; the file keeps its permission bits, and a symlink
// keeps pointing to the file it edits. In a file with CRLF line endings,
// "\n" in old_string and new_string stands for "\r\n", so the file keeps
// its line endings. Answers:
//
//	Replaced 1 occurrence in '<path>'.
//	Replaced 3 occurrences in '<path>'.                          (replace_all)
//	Error: old_string not found in '<path>'. It must match the file's text exactly, including whitespace and indentation.
//	Error: old_string occurs 3 times in '<path>'. Pass replace_all=true to replace all 3, or include more surrounding text to make it unique.
//	Error: old_string and new_string are identical; there is nothing to replace.
//	Error: File not found: '<path>'
//
// Files over [MaxEditFileSize] and binary files are refused.
//
// glob(pattern, path="/") prints the absolute paths of the files (everything
// but directories; symlinks below path are listed, not followed) under path
// whose path relative to path matches pattern, one a line, most recently
// modified first (ties by path). Pattern segments use path.Match syntax (*, ?, [a-z], \ escapes);
// a "**" segment matches any number of directories, zero included; {a,b}
// expands to alternatives. An absolute pattern ignores path. "*" matches
// names starting with a dot. Walks from "/" skip /proc, /sys and /dev. No
// match gives "No files match '<pattern>' in '<path>'."; at most
// [MaxResults] paths are printed, then "[N more matches not shown; these are
// the 1000 most recently modified]".
//
// grep(pattern, path=".", glob, mode, -B/-A/-C, literal, ignore_case)
// searches regular files (not symlinks below path) for lines matching an
// RE2 regular expression (Go's regexp syntax; literal=true matches the text
// as it is; ignore_case adds (?i)). A line ends at "\n"; a "\r" before it is
// not part of the line. A glob without
// "/" filters on base names ("*.go", "*.{ts,tsx}"), one with "/" on paths
// relative to path. Files are searched in path order and printed with
// absolute paths:
//
//	files_with_matches (default)   /w/a.go
//	count                          /w/a.go:3
//	content                        /w/a.go:12:matching line
//	content with context           /w/a.go-11-line before
//	                               /w/a.go:12:matching line
//	                               /w/a.go-13-line after
//	                               --
//	                               /w/b.go-40-...
//
// As in grep, context lines use "-", matching lines ":", and "--" separates
// groups of lines that are not adjacent (in the same file or not) when
// context was asked for. Lines longer than [MaxGrepLineLength] characters
// are cut, marked " [line cut]". No match gives "No matches for '<pattern>'
// in '<path>'.". Output stops after [MaxResults] lines, then "[output cut
// at 1000 lines; narrow the search with path, glob or a more specific
// pattern]". Binary files are skipped silently; files over
// [MaxGrepFileSize] (10 MiB) are skipped and counted in a final line
// "[N files over 10 MiB not searched]"; directories named .git, .hg or .svn
// are not searched (unless path is one).
//
// execute(command, timeout=1800s) runs "sh -c command" in the sandbox's
// working directory and answers, from [ExecuteResult.String]:
//
//	<stdout and stderr>
//	Command timed out after 5 seconds       (after a timeout only)
//	Exit code: 124
//
// The order of lines between the two streams is kept only when the
// command writes both to one (sbx serve runs commands as "exec 2>&1;
// COMMAND"). The output is followed by a newline if it lacks one; with no output the
// answer is just "Exit code: N". A timeout kills the command's whole
// process tree and gives exit code 124 with the output produced so far.
// Output beyond [Options.OutputLimit] (default 4 MiB) is cut in the middle:
// the first and last halves are kept around a line "[... output truncated:
// N bytes omitted ...]", since the end of a long log is usually what
// matters.
//
// # How the tools reach the sandbox
//
// File contents move with sbfiles.ReadFile and sbfiles.WriteFile, which use
// the sandbox's native file access or archive capability when it has one
// and otherwise short sh scripts through Exec. Glob and Grep list files with
// one find ... -exec stat command through Exec, which needs only POSIX sh
// and coreutils or busybox in the sandbox; a sandbox without them but with
// native file access is walked with ReadDir instead; a sandbox that walks
// trees natively ([FileWalker], such as the sbxd client) lists them in one
// call, with no tools needed in the sandbox. Matching (patterns,
// regular expressions) always happens on the host, in Go, so it behaves the
// same everywhere.
package fileops
