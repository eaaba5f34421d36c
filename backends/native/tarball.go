package native

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// tarDir writes the tree under dir to tw, as docker build and docker cp send
// a folder: names relative to dir, modes and symlinks kept, owned by root
// (the engine gives copied files to root unless asked otherwise). skip, when
// set, excludes entries by their slash-separated path relative to dir; an
// excluded directory is still walked when skip says so (see dockerignore).
func tarDir(tw *tar.Writer, dir string, skip func(rel string, isDir bool) (exclude, descend bool)) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if skip != nil {
			exclude, descend := skip(rel, d.IsDir())
			if exclude {
				if d.IsDir() && !descend {
					return filepath.SkipDir
				}
				return nil
			}
		}
		return tarEntry(tw, p, rel, d)
	})
}

// tarEntry writes one file, directory or symlink at host path p as name.
func tarEntry(tw *tar.Writer, p, name string, d fs.DirEntry) error {
	fi, err := d.Info()
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	// The header's size is what the file had when stat'ed; a file that
	// grows meanwhile must not overrun it.
	_, err = io.CopyN(tw, f, hdr.Size)
	return err
}

// dockerignore returns the skip function for a build context's
// .dockerignore (nil when it has none). keep lists context paths that are
// sent whatever the file says (the Dockerfile and .dockerignore itself, as
// docker build does).
func dockerignore(contextDir string, keep ...string) (func(rel string, isDir bool) (bool, bool), error) {
	f, err := os.Open(filepath.Join(contextDir, ".dockerignore"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	kept := map[string]bool{".dockerignore": true}
	for _, k := range keep {
		kept[k] = true
	}
	return func(rel string, isDir bool) (bool, bool) {
		if kept[rel] {
			return false, false
		}
		excluded, err := pm.MatchesOrParentMatches(rel)
		if err != nil || !excluded {
			return false, false
		}
		// An excluded folder may hold re-included ("!") entries, or a
		// kept file.
		descend := isDir && pm.Exclusions()
		for k := range kept {
			descend = descend || (isDir && strings.HasPrefix(k, rel+"/"))
		}
		return true, descend
	}, nil
}
