package lite

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
)

// lookupUser resolves a Docker-style user ("", "name", "uid", "name:group",
// "uid:gid") against the sandbox's own /etc/passwd and /etc/group, and
// returns the user with its supplementary groups and home folder. Numeric
// IDs need no entry, as in Docker.
func lookupUser(v *view, spec string) (specs.User, string, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" {
		userPart = "0"
	}
	passwd, _ := v.readFile("/etc/passwd")
	groups, _ := v.readFile("/etc/group")

	var u specs.User
	home := "/"
	found := false
	uid, numeric := parseID(userPart)
	for _, f := range colonRecords(passwd, 7) {
		id, ok := parseID(f[2])
		if !ok || (numeric && id != uid) || (!numeric && f[0] != userPart) {
			continue
		}
		gid, _ := parseID(f[3])
		u = specs.User{UID: id, GID: gid}
		home = f[5]
		userPart = f[0]
		found = true
		break
	}
	if !found {
		if !numeric {
			return u, "", fmt.Errorf("%w: user %q: no such user in the sandbox's /etc/passwd", backend.ErrInvalidConfig, spec)
		}
		u = specs.User{UID: uid, GID: uid}
		if uid == 0 {
			home = "/root"
		}
	}
	if hasGroup {
		gid, ok := parseID(groupPart)
		if !ok {
			ok = false
			for _, f := range colonRecords(groups, 4) {
				if f[0] == groupPart {
					gid, ok = parseID(f[2])
					break
				}
			}
			if !ok {
				return u, "", fmt.Errorf("%w: user %q: no such group in the sandbox's /etc/group", backend.ErrInvalidConfig, spec)
			}
		}
		u.GID = gid
	} else if found {
		// Supplementary groups, as login(1) and docker exec give them.
		for _, f := range colonRecords(groups, 4) {
			gid, ok := parseID(f[2])
			if ok && gid != u.GID && slices.Contains(strings.Split(f[3], ","), userPart) {
				u.AdditionalGids = append(u.AdditionalGids, gid)
			}
		}
	}
	return u, home, nil
}

func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// colonRecords splits /etc/passwd-style lines with at least n fields.
func colonRecords(data []byte, n int) [][]string {
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Split(line, ":"); len(f) >= n {
			out = append(out, f)
		}
	}
	return out
}
