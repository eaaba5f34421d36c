package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// The exec API runs every command as the container's user. A command with
// ExecRequest.User runs under "sbxd exec --user", which resolves the user
// in the pod's own /etc/passwd and /etc/group (names, uids, name:group,
// uid:gid, as docker exec --user) and switches to it: that needs a pod
// running as root (or at least with CAP_SETUID and CAP_SETGID). The first
// command as a given user checks that the switch works, so a user that
// cannot be had is an error, never a command run as the wrong user.

// checkUser makes sure commands can run as user in this pod; the answer
// is kept once it is yes.
func (s *Sandbox) checkUser(ctx context.Context, user string) error {
	if !s.sbxd {
		return fmt.Errorf("%w: the k8s backend runs a command as user %q through sbxd, which is not in pod %s (its image has no /bin/sh to copy it in with)",
			errors.ErrUnsupported, user, s.id)
	}
	if _, ok := s.users.Load(user); ok {
		return nil
	}
	if strings.ContainsAny(user, " \t\n") || strings.HasPrefix(user, "-") {
		return fmt.Errorf("%w: user %q: want a name, uid, name:group or uid:gid", backend.ErrInvalidConfig, user)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stderr strings.Builder
	code, err := s.stream(cctx, []string{sbxdPath, "exec", "--user", user, "--", "true"}, nil, io.Discard, &stderr)
	if err != nil {
		return s.explain(ctx, err)
	}
	msg := strings.TrimSpace(stderr.String())
	switch {
	case code == 0:
		s.users.Store(user, true)
		return nil
	case strings.Contains(msg, "does not run as root"), strings.Contains(msg, "not permitted"):
		return fmt.Errorf("%w: commands in pod %s cannot switch to user %q: the pod does not run as root (the Kubernetes exec API has no user, so sandboxkit switches inside the pod; set the user for the whole pod with user = \"UID\" or run_as_user instead): %s",
			errors.ErrUnsupported, s.id, user, msg)
	case strings.Contains(msg, "flag provided but not defined"):
		return fmt.Errorf("%w: the sbxd in pod %s predates switching users (sbxd exec --user); recreate the sandbox to run commands as user %q",
			errors.ErrUnsupported, s.id, user)
	case code == 125:
		return fmt.Errorf("%w: user %q: %s", backend.ErrInvalidConfig, user, msg)
	}
	return fmt.Errorf("switching to user %q in pod %s: exit code %d: %s", user, s.id, code, msg)
}

// podUser turns Spec.User into the pod's runAsUser and runAsGroup: a
// numeric uid or uid:gid ("root" is 0), since Kubernetes sets users by
// number before the image's /etc/passwd can be read.
func podUser(user string) (uid, gid *int64, err error) {
	if user == "" {
		return nil, nil, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	parse := func(s string) (*int64, error) {
		if s == "root" {
			s = "0"
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > 1<<31-1 {
			return nil, fmt.Errorf("%w: user %q: the k8s backend sets the pod's user by number (Kubernetes runAsUser): write user = \"1000\" or \"1000:1000\" (ExecRequest.User takes names)",
				backend.ErrInvalidConfig, user)
		}
		return &n, nil
	}
	if uid, err = parse(u); err != nil {
		return nil, nil, err
	}
	if hasGroup {
		if gid, err = parse(g); err != nil {
			return nil, nil, err
		}
	}
	return uid, gid, nil
}
