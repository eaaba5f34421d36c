package server

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// A create's volumes (sandbox-lifecycle.yml's Volume) as backend volumes:
//   - host: a bind of a host path under one of the operator's allowed
//     prefixes (Options.OSBAllowedHostPaths, [sandbox.serve]
//     allowed_host_paths, as the real server's allowed_host_paths), with
//     symlinks resolved before the check; none allowed: refused;
//   - pvc: a named volume of the backend, named "osb-INSTANCE-CLAIM" so
//     that agents reach only volumes made through this server's API;
//   - ossfs: refused (no OSS here).

// osbVolume is a Volume of the create request.
type osbVolume struct {
	Name string `json:"name"`
	Host *struct {
		Path string `json:"path"`
	} `json:"host"`
	PVC *struct {
		ClaimName                  string `json:"claimName"`
		CreateIfNotExists          *bool  `json:"createIfNotExists"`
		DeleteOnSandboxTermination bool   `json:"deleteOnSandboxTermination"`
	} `json:"pvc"`
	OSSFS     json.RawMessage `json:"ossfs"`
	MountPath string          `json:"mountPath"`
	ReadOnly  bool            `json:"readOnly"`
	SubPath   string          `json:"subPath"`
}

// osbVolumes checks the request's volumes and returns them as the
// backend's.
func (s *Server) osbVolumes(raw json.RawMessage) ([]backend.Volume, error) {
	var vols []osbVolume
	if err := json.Unmarshal(raw, &vols); err != nil {
		return nil, fmt.Errorf("volumes: %v", err)
	}
	var out []backend.Volume
	var names, targets []string
	for _, v := range vols {
		where := fmt.Sprintf("volume %q", v.Name)
		switch {
		case v.Name == "":
			return nil, fmt.Errorf("volumes: a volume has no name")
		case slices.Contains(names, v.Name):
			return nil, fmt.Errorf("%s: the name is used twice", where)
		case !path.IsAbs(v.MountPath) || path.Clean(v.MountPath) == "/":
			return nil, fmt.Errorf("%s: mountPath %q must be an absolute path other than /", where, v.MountPath)
		case slices.Contains(targets, path.Clean(v.MountPath)):
			return nil, fmt.Errorf("%s: mountPath %s is used twice", where, v.MountPath)
		case countTrue(v.Host != nil, v.PVC != nil, present(v.OSSFS)) != 1:
			return nil, fmt.Errorf("%s: give exactly one of host, pvc and ossfs", where)
		case present(v.OSSFS):
			return nil, fmt.Errorf("%s: ossfs volumes are not supported by sandboxkit's server (no OSS here); use host or pvc", where)
		}
		names, targets = append(names, v.Name), append(targets, path.Clean(v.MountPath))
		vol := backend.Volume{Target: path.Clean(v.MountPath), ReadOnly: v.ReadOnly}
		if v.Host != nil {
			src, err := s.osbHostPath(v.Host.Path, v.SubPath)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", where, err)
			}
			vol.Type, vol.Source = backend.VolumeBind, src
		} else {
			claim := v.PVC.ClaimName
			if !labelChars(claim, "-_.") || len(claim) > 63 {
				return nil, fmt.Errorf("%s: claimName %q: letters, digits, '-', '_' and '.', at most 63", where, claim)
			}
			if v.SubPath != "" {
				return nil, fmt.Errorf("%s: subPath is not supported with pvc volumes here", where)
			}
			vol.Type, vol.Source = backend.VolumeNamed, "osb-"+s.opts.Instance+"-"+claim
		}
		out = append(out, vol)
	}
	return out, nil
}

// osbHostPath is host path p (and sub) resolved, if it lies under one of
// the operator's allowed prefixes.
func (s *Server) osbHostPath(p, sub string) (string, error) {
	if len(s.opts.OSBAllowedHostPaths) == 0 {
		return "", fmt.Errorf("host path %s: this server's operator allows no host paths ([sandbox.serve] allowed_host_paths)", p)
	}
	if !filepath.IsAbs(p) || sub != "" && (filepath.IsAbs(sub) || !filepath.IsLocal(sub)) {
		return "", fmt.Errorf("host path %q (subPath %q): want an absolute path and a relative subPath inside it", p, sub)
	}
	full := filepath.Join(p, sub)
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", fmt.Errorf("host path %s: %v", full, err)
	}
	for _, allowed := range s.opts.OSBAllowedHostPaths {
		root, err := filepath.EvalSymlinks(allowed)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(root, real); err == nil && filepath.IsLocal(rel) || real == root {
			return real, nil
		}
	}
	return "", fmt.Errorf("host path %s is not under the paths this server's operator allows (%s)", full, strings.Join(s.opts.OSBAllowedHostPaths, ", "))
}

// countTrue counts the true ones.
func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
