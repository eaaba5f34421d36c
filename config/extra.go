package config

import (
	"fmt"
	"slices"
	"strings"
)

// OpenSage's [extra] is a free map: its backends read the keys they know and
// ignore the rest, so one file moves between backends by its backend key.
// sandboxkit keeps that promise: a key that nothing selected reads is a
// warning naming the key and who reads it, never an error. Only a value a
// reader of this launch takes and cannot use is refused (its type, or its
// backend's EntrySpec).

// openSageOnlyExtras are [extra] keys OpenSage's own code writes or reads
// and sandboxkit has no use for, by who reads them (for the warning).
var openSageOnlyExtras = map[string]string{
	// The cache loader writes them into entries it restores.
	"cached_rootfs_tar": "OpenSage's cache loader",
	"cached_base_image": "OpenSage's cache loader",
}

// ExtraWarnings returns a warning for each key of entry name's [extra]
// table that no reader of this launch uses: not the selected backend (its
// EntryExtraKeys and EntryTTLKey) and not the entry's initializer (named
// by initializer, "the main initializer"), whose keys are own. others names the other readers of keys (an initializer of
// another type: "the main initializer"); the registry's other backends are
// added here. Each warning names the key, who reads it, and says it is
// ignored; a key nobody reads gets a did-you-mean among own and the
// selected backend's keys. With backend = "auto" before Open chose, keys
// some backend reads are not warned about.
func (c *Config) ExtraWarnings(name, initializer string, own []string, others map[string][]string) []string {
	e, err := c.Entry(name)
	if err != nil || len(e.Extra) == 0 {
		return nil
	}
	selName, sel, selected := c.selectedFactory()
	owners := map[string][]string{}
	if c.reg != nil {
		owners = c.reg.extraKeyOwners()
	}
	var candidates []string
	candidates = append(candidates, own...)
	if selected {
		candidates = append(candidates, sel.EntryExtraKeys...)
		if sel.EntryTTLKey != "" {
			candidates = append(candidates, sel.EntryTTLKey)
		}
	}
	var out []string
	for _, k := range sortedKeys(e.Extra) {
		if slices.Contains(own, k) {
			continue
		}
		backends := owners[k]
		if len(backends) > 0 && (!selected || slices.Contains(backends, selName)) {
			continue
		}
		at := entryKey(name).String() + ".extra." + k
		var readers []string
		if len(backends) > 0 {
			readers = append(readers, phrase("the", backends, "backend", "backends"))
		}
		readers = append(readers, others[k]...)
		switch {
		case len(readers) > 0:
			not := initializer
			if selected {
				not = "the " + selName + " backend or " + not
			}
			out = append(out, fmt.Sprintf("%s: read by %s, not by %s (ignored)", at, strings.Join(readers, " and "), not))
		case openSageOnlyExtras[k] != "":
			out = append(out, fmt.Sprintf("%s: read by %s, not by sandboxkit (ignored)", at, openSageOnlyExtras[k]))
		default:
			out = append(out, fmt.Sprintf("%s: read by nothing in sandboxkit (ignored)%s", at, DidYouMean(k, candidates)))
		}
	}
	return out
}

// phrase joins names as "the lite backend" or "the k8s and lite backends".
func phrase(article string, names []string, one, many string) string {
	if len(names) == 1 {
		return article + " " + names[0] + " " + one
	}
	return article + " " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " " + many
}
