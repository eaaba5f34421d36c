package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// EnvProjectRoot names the environment variable giving the project root
// when [sandbox] project_root is not set.
const EnvProjectRoot = "SBX_PROJECT_ROOT"

// ProjectMarkers are the files and folders whose presence makes a folder a
// project root, when neither [sandbox] project_root nor $SBX_PROJECT_ROOT
// names one.
var ProjectMarkers = []string{".git", "pyproject.toml", "go.mod", "setup.py"}

// projectRootKey is Config.ProjectRootFrom when the file names the root.
const projectRootKey = "[sandbox] project_root"

// resolveProjectRoot sets c.ProjectRoot and c.ProjectRootFrom: [sandbox]
// project_root (relative to the config file's folder), else
// $SBX_PROJECT_ROOT (relative to the current directory), else the nearest
// folder at or above the config file's folder holding one of
// ProjectMarkers, else the config file's folder. OpenSage joins its
// project_relative_* keys to its source checkout's root; a config file
// kept in a project's tree finds the same folder this way.
func (c *Config) resolveProjectRoot() error {
	if p := c.Sandbox.ProjectRoot; p != "" {
		abs, err := resolveHostPath(p, c.Dir)
		if err != nil {
			return invalidf("%s: sandbox.project_root: %v", c.Describe(), err)
		}
		c.ProjectRoot, c.ProjectRootFrom = abs, projectRootKey
		return nil
	}
	if p := os.Getenv(EnvProjectRoot); p != "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("%s: $%s: %w", c.Describe(), EnvProjectRoot, err)
		}
		abs, err := resolveHostPath(p, wd)
		if err != nil {
			return invalidf("%s: $%s: %v", c.Describe(), EnvProjectRoot, err)
		}
		c.ProjectRoot, c.ProjectRootFrom = abs, "$"+EnvProjectRoot
		return nil
	}
	for dir := c.Dir; ; {
		for _, m := range ProjectMarkers {
			if _, err := os.Lstat(filepath.Join(dir, m)); err == nil {
				c.ProjectRoot, c.ProjectRootFrom = dir, "the nearest folder holding "+m+" at or above the config's folder"
				return nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	c.ProjectRoot = c.Dir
	c.ProjectRootFrom = "the config's folder: no " + strings.Join(ProjectMarkers[:len(ProjectMarkers)-1], ", ") +
		" or " + ProjectMarkers[len(ProjectMarkers)-1] + " at or above it"
	return nil
}

// ProjectPath resolves a project_relative_* path written in the config:
// "~" expanded, relative to ProjectRoot ("" stays "").
func (c *Config) ProjectPath(p string) string {
	if p == "" {
		return ""
	}
	abs, err := resolveHostPath(p, c.ProjectRoot)
	if err != nil {
		return p
	}
	return abs
}

// CheckHostPaths checks that the host files a launch reads exist, so that a
// mistake shows before anything is made: the project root when [sandbox]
// project_root or $SBX_PROJECT_ROOT names it, then CheckSharedData and
// CheckBuild of every entry. Errors wrap backend.ErrInvalidConfig and name
// the key and the path it resolved to.
func (c *Config) CheckHostPaths() error {
	var key string
	switch c.ProjectRootFrom {
	case projectRootKey:
		key = "sandbox.project_root"
	case "$" + EnvProjectRoot:
		key = "$" + EnvProjectRoot
	}
	if key != "" {
		if err := c.checkPath(key, "project root", c.ProjectRoot, aFolder); err != nil {
			return err // everything else resolves against it
		}
	}
	errs := []error{c.CheckSharedData()}
	for _, name := range c.SandboxNames() {
		errs = append(errs, c.CheckBuild(name))
	}
	return errors.Join(errs...)
}

// CheckSharedData checks the shared data (absolute_shared_data_path,
// else project_relative_shared_data_path), when set, on this machine,
// where every backend reads it from. Shared data that does not exist is
// no error (OpenSage copies nothing and goes on with an empty /shared;
// SharedDataWarning says so); one that cannot be read is.
func (c *Config) CheckSharedData() error {
	key := c.sharedDataKey()
	if key == "" || c.SharedDataWarning() != "" {
		return nil
	}
	return c.checkPath("sandbox."+key, "shared data", c.SharedDataPath(), aFolderOrFile)
}

// SharedDataWarning says, when the shared data a key names does not
// exist, that the launch copies nothing and the shared folder starts
// empty, as OpenSage's does ("" when it exists or none is set).
func (c *Config) SharedDataWarning() string {
	key := c.sharedDataKey()
	if key == "" {
		return ""
	}
	p := c.SharedDataPath()
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	where := c.relativeHint(key)
	if key == "absolute_shared_data_path" && !filepath.IsAbs(c.Sandbox.AbsoluteSharedDataPath) &&
		!strings.HasPrefix(c.Sandbox.AbsoluteSharedDataPath, "~") {
		where = fmt.Sprintf(" (relative to the working directory %s, as in OpenSage)", c.WorkDir)
	}
	return fmt.Sprintf("sandbox.%s: shared data %s does not exist%s: nothing is copied and %s starts empty, as in OpenSage",
		key, p, where, c.Sandbox.Paths.Shared)
}

// CheckBuild checks that entry name's Dockerfile, when it sets one, and
// its build context (the Dockerfile's folder) exist on this machine, where
// every backend reads them from.
func (c *Config) CheckBuild(name string) error {
	e := c.Sandbox.Sandboxes[name]
	if e == nil {
		return nil
	}
	key, df := e.dockerfileKey(), e.DockerfilePath()
	if key == "" || !filepath.IsAbs(df) {
		return nil // none, or a malformed path that Spec reports
	}
	key = EntryKey(name) + "." + key
	if err := c.checkPath(key, "build context", filepath.Dir(df), aFolder); err != nil {
		return err
	}
	return c.checkPath(key, "Dockerfile", df, aFile)
}

// checkPath checks that host path p, read from key, exists and is of kind
// want.
func (c *Config) checkPath(key, what, p string, want pathKind) error {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return invalidf("%s: %s: %s %s does not exist%s", c.Describe(), key, what, p, c.relativeHint(key))
	case err != nil:
		return invalidf("%s: %s: %s: %v", c.Describe(), key, what, err)
	case want == aFolder && !fi.IsDir():
		return invalidf("%s: %s: %s %s is not a folder", c.Describe(), key, what, p)
	case want == aFile && fi.IsDir():
		return invalidf("%s: %s: %s %s is a folder, not a file", c.Describe(), key, what, p)
	}
	return nil
}

type pathKind int

const (
	aFolderOrFile pathKind = iota
	aFolder
	aFile
)

// relativeHint says what a project_relative_* key's path is relative to,
// for messages about it.
func (c *Config) relativeHint(key string) string {
	if !strings.Contains(key, "project_relative_") {
		return ""
	}
	return fmt.Sprintf(" (relative to the project root %s, from %s; set [sandbox] project_root or $%s to use another)",
		c.ProjectRoot, c.ProjectRootFrom, EnvProjectRoot)
}

// OpenSageSource is where an OpenSage checkout keeps the folders that fill
// a session's bash_tools and sandbox_scripts volumes, relative to its root.
const (
	OpenSageBashTools      = "src/opensage/bash_tools"
	OpenSageSandboxScripts = "src/opensage/sandbox_scripts"
)

// ToolFolders returns the host folders that fill a session's bash_tools
// (read-write) and sandbox_scripts (read-only) volumes, and where each came
// from: [sandbox] bash_tools_path and sandbox_scripts_path, else, when the
// project root is an OpenSage checkout, its src/opensage/bash_tools and
// src/opensage/sandbox_scripts (as OpenSage stages them), else "" (the
// volume starts empty).
func (c *Config) ToolFolders() (bashTools, bashToolsFrom, scripts, scriptsFrom string) {
	pick := func(key, set, rel string) (string, string) {
		if set != "" {
			return c.HostPath(set), "[sandbox] " + key
		}
		p := filepath.Join(c.ProjectRoot, rel)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return p, "the OpenSage checkout at the project root " + c.ProjectRoot
		}
		return "", ""
	}
	bashTools, bashToolsFrom = pick("bash_tools_path", c.Sandbox.BashToolsPath, OpenSageBashTools)
	scripts, scriptsFrom = pick("sandbox_scripts_path", c.Sandbox.SandboxScriptsPath, OpenSageSandboxScripts)
	return bashTools, bashToolsFrom, scripts, scriptsFrom
}
