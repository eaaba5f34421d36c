package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

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
