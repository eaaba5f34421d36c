package sbxdwire

// GrepRequest is one search (POST RouteGrep; see sbxd's Client.Grep).
type GrepRequest struct {
	// Pattern is an RE2 regular expression (Go's regexp syntax), or plain
	// text with Literal.
	Pattern    string `json:"pattern"`
	Literal    bool   `json:"literal,omitempty"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	// Path is a file or a directory to search below.
	Path string `json:"path"`
	// Glob filters the files of a directory search: on base names when it
	// has no "/", else on paths relative to Path. ** and {a,b} work.
	Glob string `json:"glob,omitempty"`
	// Before and After are lines of context around each match.
	Before int `json:"before,omitempty"`
	After  int `json:"after,omitempty"`
	// FilesOnly stops at a file's first match; CountOnly reports counts
	// without lines.
	FilesOnly bool `json:"files_only,omitempty"`
	CountOnly bool `json:"count_only,omitempty"`
	// MaxFileSize: larger files are skipped and counted (0: 10 MiB).
	MaxFileSize int64 `json:"max_file_size,omitempty"`
	// SkipDirs are directory names (or absolute paths) not searched
	// (nil: .git, .hg, .svn).
	SkipDirs []string `json:"skip_dirs,omitempty"`
	// MaxLines bounds the lines returned over all files (0: 10000); the
	// answer then says it was cut.
	MaxLines int `json:"max_lines,omitempty"`
}

// GrepFile is what one file with matches gave.
type GrepFile struct {
	Path string `json:"path"`
	// Count is the number of matching lines (1 with FilesOnly).
	Count int        `json:"count"`
	Lines []GrepLine `json:"lines,omitempty"`
}

// GrepLine is a matching line, or a context line when Match is false. N is
// its 1-based number; Text has no line ending.
type GrepLine struct {
	N     int    `json:"n"`
	Text  string `json:"text"`
	Match bool   `json:"match,omitempty"`
}

// GrepMessage is one NDJSON line of the grep route: a file, or the final
// summary (Done).
type GrepMessage struct {
	File         *GrepFile `json:"file,omitempty"`
	Done         bool      `json:"done,omitempty"`
	SkippedLarge int       `json:"skipped_large,omitempty"`
	Truncated    bool      `json:"truncated,omitempty"`
	Error        string    `json:"error,omitempty"`
}
