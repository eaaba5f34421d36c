package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
)

// volumeNameRE is Docker's rule for volume names.
var volumeNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`) })

// parseVolume parses a "host:sandbox[:ro|rw]" spec. A host part without "/"
// that does not start with "." or "~" names a volume; any other is a host
// path: "~" is expanded and a relative path resolves against dir. A host path
// that does not exist is not an error: skip says why it is left out, so the
// same file works on machines that lack an optional folder.
func parseVolume(spec, dir string) (v backend.Volume, skip string, err error) {
	return parseVolumeOn(spec, hostPaths{dir: dir})
}

// hostPaths says how the host parts of volume specs are read.
type hostPaths struct {
	// dir is the folder relative host paths resolve against.
	dir string
	// remote, when set, names a backend whose host paths are folders on
	// another machine (remotedocker's server): they must be absolute there
	// and are not looked up here.
	remote string
}

// parseVolumeOn is parseVolume with host paths read as hp says.
func parseVolumeOn(spec string, hp hostPaths) (v backend.Volume, skip string, err error) {
	const want = "want host:sandbox[:ro|rw]"
	parts := strings.Split(spec, ":")
	switch {
	case len(parts) == 1:
		return v, "", fmt.Errorf("no sandbox path (%s)", want)
	case len(parts) > 3:
		return v, "", fmt.Errorf("too many ':' (%s)", want)
	case parts[0] == "":
		return v, "", fmt.Errorf("empty host path (%s)", want)
	case parts[1] == "":
		return v, "", fmt.Errorf("empty sandbox path (%s)", want)
	}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			v.ReadOnly = true
		case "rw":
		default:
			return v, "", fmt.Errorf("mode %q: want ro or rw", parts[2])
		}
	}
	return volume(parts[0], parts[1], v.ReadOnly, hp)
}

// volume checks and resolves one mount of source at target.
func volume(source, target string, readOnly bool, hp hostPaths) (v backend.Volume, skip string, err error) {
	switch {
	case !path.IsAbs(target):
		return v, "", fmt.Errorf("sandbox path %q is not absolute", target)
	case strings.TrimSpace(path.Clean(target)) != path.Clean(target):
		return v, "", fmt.Errorf("sandbox path %q starts or ends with white space", target)
	case path.Clean(target) == "/":
		return v, "", fmt.Errorf("sandbox path %q is the sandbox's root, which a volume cannot replace", target)
	}
	v = backend.Volume{Type: backend.VolumeBind, Target: path.Clean(target), ReadOnly: readOnly}
	if isVolumeName(source) {
		if !volumeNameRE().MatchString(source) {
			return v, "", fmt.Errorf("volume name %q: want letters, digits, '_', '.', '-'", source)
		}
		v.Type, v.Source = backend.VolumeNamed, source
		return v, "", nil
	}
	if hp.remote != "" {
		if !path.IsAbs(source) {
			return v, "", fmt.Errorf("host path %q: the %s backend mounts folders of its remote host, so write an absolute path on that host", source, hp.remote)
		}
		v.Source = path.Clean(source)
		return v, "", nil // not looked up: it is not on this machine
	}
	host, err := resolveHostPath(source, hp.dir)
	if err != nil {
		return v, "", err
	}
	v.Source = host
	switch _, err := os.Stat(host); {
	case errors.Is(err, fs.ErrNotExist):
		if host != source {
			return v, fmt.Sprintf("host path %s does not exist", host), nil
		}
		return v, "host path does not exist", nil
	case err != nil:
		return v, "", fmt.Errorf("host path: %w", err)
	}
	return v, "", nil
}

func isVolumeName(source string) bool {
	return !strings.Contains(source, "/") && !strings.HasPrefix(source, ".") && !strings.HasPrefix(source, "~")
}

// parseMount parses a docker --mount spec:
// "type=bind|volume,source=...,target=...[,readonly]". Keys may also be
// spelt src, destination, dst and ro, as Docker allows.
func parseMount(spec string, hp hostPaths) (v backend.Volume, skip string, err error) {
	typ, source, target, readOnly := "volume", "", "", false
	for field := range strings.SplitSeq(spec, ",") {
		k, val, hasVal := strings.Cut(strings.TrimSpace(field), "=")
		switch strings.ToLower(k) {
		case "type":
			typ = val
		case "source", "src":
			source = val
		case "target", "destination", "dst":
			target = val
		case "readonly", "ro":
			readOnly = true
			if hasVal {
				if readOnly, err = strconv.ParseBool(val); err != nil {
					return v, "", fmt.Errorf("readonly=%q: want true or false", val)
				}
			}
		case "":
			return v, "", errors.New("empty field")
		default:
			return v, "", fmt.Errorf("option %q is not supported (want type, source, target, readonly)", k)
		}
	}
	switch {
	case typ != "bind" && typ != "volume":
		return v, "", fmt.Errorf("type %q is not supported (want bind or volume)", typ)
	case source == "":
		return v, "", errors.New("no source")
	case target == "":
		return v, "", errors.New("no target")
	case typ == "volume" && !isVolumeName(source):
		return v, "", fmt.Errorf("source %q of a volume mount is not a volume name", source)
	case typ == "bind" && isVolumeName(source):
		source = "./" + source // a bind source is always a path
	}
	return volume(source, target, readOnly, hp)
}

// resolveHostPath expands a leading "~" and makes p absolute against dir.
func resolveHostPath(p, dir string) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot expand ~ in %q: %w", p, err)
		}
		p = filepath.Join(home, p[1:])
	} else if strings.HasPrefix(p, "~") {
		return "", fmt.Errorf("cannot expand %q: only ~ and ~/ are supported", p)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p), nil
}
