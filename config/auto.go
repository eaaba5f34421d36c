package config

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// EnvAutoRecord names the environment variable that overrides where
// backend = "auto" records its choice (see Registry.Open).
const EnvAutoRecord = "SBX_AUTO_RECORD"

// autoRecord is what backend = "auto" chose on this machine: the strongest
// backend it has used, so that it never falls back silently to a weaker one.
type autoRecord struct {
	Backend  string    `json:"backend"`
	Rank     int       `json:"rank"`
	ChosenAt time.Time `json:"chosen_at"`
}

// autoRecordPath is where the record lives: $SBX_AUTO_RECORD, else
// sandboxkit/auto-backend.json in the user's cache folder ("" when there is
// none: the choice is then not remembered across processes).
func autoRecordPath() string {
	if p := os.Getenv(EnvAutoRecord); p != "" {
		return p
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "sandboxkit", "auto-backend.json")
}

func readAutoRecord(path string) (autoRecord, error) {
	var rec autoRecord
	if path == "" {
		return rec, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil {
		return rec, fmt.Errorf("backend auto: reading its earlier choice from %s: %v (remove the file to let auto choose afresh)", path, err)
	}
	return rec, nil
}

func writeAutoRecord(path string, rec autoRecord) error {
	if path == "" {
		return nil
	}
	data, _ := json.Marshal(rec)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// candidates are the registered backends auto may choose, strongest first.
func (r *Registry) autoCandidates() []backend.Factory {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var fs []backend.Factory
	for _, f := range r.factories {
		if f.AutoRank > 0 {
			fs = append(fs, f)
		}
	}
	slices.SortFunc(fs, func(a, b backend.Factory) int { return cmp.Compare(b.AutoRank, a.AutoRank) })
	return fs
}

// openAuto opens the strongest candidate that works here now. It refuses,
// instead of falling back, when a stronger backend was chosen before on this
// machine (the record) and no longer works: the user must start it again or
// choose a backend by name. The choice is in cfg.Chosen; a choice of local
// adds LocalNotice to cfg.Warnings.
func (r *Registry) openAuto(ctx context.Context, cfg *Config, logger *slog.Logger) (backend.Backend, error) {
	path := autoRecordPath()
	rec, err := readAutoRecord(path)
	if err != nil {
		return nil, backend.InvalidConfigf("%v", err)
	}
	var tried []string
	for _, f := range r.autoCandidates() {
		b, err := openFactory(ctx, f.Name, f, cfg, logger)
		if err == nil && f.Probe != nil {
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err = f.Probe(pctx, b)
			cancel()
			if err != nil {
				b.Close()
			}
		}
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", f.Name, err))
			continue
		}
		if rec.Backend != "" && f.AutoRank < rec.Rank {
			b.Close()
			return nil, fmt.Errorf("%w: backend auto chose %s on this machine before (%s, recorded in %s), and it does not work now (%s); "+
				"auto never falls back silently to weaker isolation: start it again, or choose a backend by name (sbx --backend %s, or [sandbox] backend = %q), "+
				"or remove %s to let auto choose afresh",
				backend.ErrUnavailable, rec.Backend, rec.ChosenAt.Format(time.DateTime), path, strings.Join(tried, "; "), f.Name, f.Name, path)
		}
		if f.AutoRank > rec.Rank || rec.Backend == "" {
			if err := writeAutoRecord(path, autoRecord{Backend: f.Name, Rank: f.AutoRank, ChosenAt: time.Now()}); err != nil {
				logger.Warn("backend auto: cannot record its choice", "path", path, "err", err)
			}
		}
		cfg.Chosen = f.Name
		if b.Capabilities().Isolation == backend.IsolationNone && !slices.Contains(cfg.Warnings, LocalNotice) {
			cfg.Warnings = append(cfg.Warnings, LocalNotice)
		}
		logger.Info("backend auto: chose "+f.Name, "not available", tried)
		return b, nil
	}
	return nil, fmt.Errorf("%w: backend auto: no backend works on this machine (%s)", backend.ErrUnavailable, strings.Join(tried, "; "))
}
