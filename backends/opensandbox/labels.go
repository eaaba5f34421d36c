package opensandbox

import (
	"encoding/base32"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
)

// OpenSandbox keeps metadata as Kubernetes labels and checks it against
// their rules: a key is an optional DNS-subdomain prefix and "/" and a name
// of at most 63 characters from [A-Za-z0-9_.-] that starts and ends with a
// letter or digit (the "opensandbox.io/" prefix is reserved); a value is
// empty or such a name. Our labels break them: values such as
// "host:pid:start" or a path hold other characters, and any key or value
// may come from a user's config. So labels are stored as follows, and read
// back the same way:
//
//   - a key or value that satisfies the rules is stored as it is;
//   - any other value v is stored as "x<n>." followed by the first piece of
//     base32(v) (lowercase, unpadded), the other n-1 pieces going into
//     keys "<key>.2" ... "<key>.<n>" (at most 9 pieces: 540 base32
//     characters, 337 bytes);
//   - any other key k is stored as "x--" + base32(k) (at most 36 bytes);
//   - a raw key or value that looks like one of these forms is encoded too,
//     so reading back is unambiguous.

var (
	labelNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`) })
	dnsSubdomRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	})
	valueMarkRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^x([1-9])\.`) })
	contKeyRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\.([2-9])$`) })
	labelEncoder = base32.StdEncoding.WithPadding(base32.NoPadding)
)

const (
	keyMark        = "x--"
	maxLabelName   = 63
	maxValuePieces = 9
	pieceLen       = maxLabelName - len("x9.")
)

// Metadata keys only this backend reads; they are not shown in Info.Labels.
const (
	labelPrefix     = "sandboxkit.opensandbox."
	labelWorkDir    = labelPrefix + "workdir"
	labelUser       = labelPrefix + "user"
	labelPorts      = labelPrefix + "ports"
	labelTokenNonce = labelPrefix + "token-nonce"
)

func validLabelKey(k string) bool {
	if len(k) > 253 || strings.HasPrefix(k, "opensandbox.io/") {
		return false
	}
	name := k
	if prefix, n, ok := strings.Cut(k, "/"); ok {
		if prefix == "" || !dnsSubdomRE().MatchString(prefix) {
			return false
		}
		name = n
	}
	return len(name) <= maxLabelName && labelNameRE().MatchString(name)
}

func validLabelValue(v string) bool {
	return v == "" || (len(v) <= maxLabelName && labelNameRE().MatchString(v))
}

func encode32(s string) string { return strings.ToLower(labelEncoder.EncodeToString([]byte(s))) }

func decode32(s string) (string, bool) {
	b, err := labelEncoder.DecodeString(strings.ToUpper(s))
	return string(b), err == nil
}

// encodeKey returns the stored form of key k.
func encodeKey(k string) (string, error) {
	if k == "" {
		return "", fmt.Errorf("%w: a label key is empty", backend.ErrInvalidConfig)
	}
	if validLabelKey(k) && !strings.HasPrefix(k, keyMark) && !contKeyRE().MatchString(k) {
		return k, nil
	}
	e := keyMark + encode32(k)
	if len(e) > maxLabelName {
		return "", fmt.Errorf("%w: label key %q is too long for OpenSandbox metadata (at most %d bytes when it is not a valid Kubernetes label key)",
			backend.ErrInvalidConfig, k, (maxLabelName-len(keyMark))*5/8)
	}
	return e, nil
}

// encodeLabels turns labels into OpenSandbox metadata.
func encodeLabels(labels map[string]string) (map[string]string, error) {
	md := make(map[string]string, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		ek, err := encodeKey(k)
		if err != nil {
			return nil, err
		}
		pieces, err := encodeValue(v)
		if err != nil {
			return nil, fmt.Errorf("label %q: %w", k, err)
		}
		if len(pieces) > 1 && len(ek)+2 > 253 {
			return nil, fmt.Errorf("%w: label %q: key too long to hold a value of %d bytes", backend.ErrInvalidConfig, k, len(v))
		}
		for i, p := range pieces {
			key := ek
			if i > 0 {
				key = ek + "." + strconv.Itoa(i+1)
			}
			if _, dup := md[key]; dup {
				return nil, fmt.Errorf("%w: labels %q collide in OpenSandbox metadata", backend.ErrInvalidConfig, key)
			}
			md[key] = p
		}
	}
	return md, nil
}

// encodeValue returns the stored pieces of a value: the first goes under
// the label's key, the others under "<key>.2" and on.
func encodeValue(v string) ([]string, error) {
	if validLabelValue(v) && !valueMarkRE().MatchString(v) {
		return []string{v}, nil
	}
	e := encode32(v)
	n := (len(e) + pieceLen - 1) / pieceLen
	if n > maxValuePieces {
		return nil, fmt.Errorf("%w: value of %d bytes is too long for OpenSandbox metadata (at most %d)",
			backend.ErrInvalidConfig, len(v), maxValuePieces*pieceLen*5/8)
	}
	pieces := make([]string, n)
	for i := range n {
		pieces[i] = e[i*pieceLen : min((i+1)*pieceLen, len(e))]
	}
	pieces[0] = "x" + strconv.Itoa(n) + "." + pieces[0]
	return pieces, nil
}

// decodeLabels reverses encodeLabels. Metadata it cannot decode (written by
// someone else) is returned as it is.
func decodeLabels(md map[string]string) map[string]string {
	labels := make(map[string]string, len(md))
	used := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		if used[k] {
			continue
		}
		v := md[k]
		if m := valueMarkRE().FindStringSubmatch(v); m != nil {
			n, _ := strconv.Atoi(m[1])
			enc := strings.TrimPrefix(v, m[0])
			var parts []string
			for i := 2; i <= n; i++ {
				part, ok := md[k+"."+strconv.Itoa(i)]
				if !ok {
					parts = nil
					break
				}
				parts = append(parts, k+"."+strconv.Itoa(i))
				enc += part
			}
			if dec, ok := decode32(enc); ok && (n == 1 || parts != nil) {
				v = dec
				for _, p := range parts {
					used[p] = true
					delete(labels, p)
				}
			}
		}
		key := k
		if strings.HasPrefix(k, keyMark) {
			if dec, ok := decode32(strings.TrimPrefix(k, keyMark)); ok {
				key = dec
			}
		}
		labels[key] = v
	}
	return labels
}

// metadataFilter returns the metadata query value that selects sandboxes
// carrying every label in want that is stored in one piece (the others
// cannot be matched by the server; the caller filters those itself).
func metadataFilter(want map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		ek, err := encodeKey(k)
		if err != nil {
			continue
		}
		pieces, err := encodeValue(want[k])
		if err != nil || len(pieces) != 1 {
			continue
		}
		parts = append(parts, queryEscape(ek)+"="+queryEscape(pieces[0]))
	}
	return strings.Join(parts, "&")
}

// queryEscape is url.QueryEscape for the characters labels may hold; they
// need none, but "/" in prefixed keys reads better escaped.
func queryEscape(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "=", "%3D", "+", "%2B", " ", "%20").Replace(s)
}
