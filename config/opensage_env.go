package config

import "os"

// openSageCacheVars are OpenSage's variables for where its session manager
// keeps a backend's cache manifests (NOTES.md: MGR). sandboxkit writes a
// checkpoint where session.Checkpoint is told, so a config for that backend
// warns when one is set instead of taking it silently.
var openSageCacheVars = map[string]string{
	"remotedocker": "OPENSAGE_REMOTE_DOCKER_CACHE_DIR",
	"opensandbox":  "OPENSAGE_OPENSANDBOX_CACHE_DIR",
}

// warnOpenSageCacheVars adds the warning for the config's backend.
func (p *parser) warnOpenSageCacheVars() {
	env := openSageCacheVars[p.cfg.Sandbox.Backend]
	if env == "" || os.Getenv(env) == "" {
		return
	}
	p.warnf("$%s is set: it names where OpenSage's session manager keeps %s cache manifests; sandboxkit writes a checkpoint's manifest and archives where session.Checkpoint is told (the variable is not used)",
		env, p.cfg.Sandbox.Backend)
}
