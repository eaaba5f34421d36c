package backend

import (
	"io/fs"
	"time"
)

// NewFileInfo returns an fs.FileInfo with the given fields, for backends
// that learn about files from a wire format rather than a local stat.
func NewFileInfo(name string, size int64, mode fs.FileMode, modTime time.Time) fs.FileInfo {
	return fileInfo{name: name, size: size, mode: mode, modTime: modTime}
}

type fileInfo struct {
	name    string
	size    int64
	mode    fs.FileMode
	modTime time.Time
}

func (f fileInfo) Name() string       { return f.name }
func (f fileInfo) Size() int64        { return f.size }
func (f fileInfo) Mode() fs.FileMode  { return f.mode }
func (f fileInfo) ModTime() time.Time { return f.modTime }
func (f fileInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fileInfo) Sys() any           { return nil }
