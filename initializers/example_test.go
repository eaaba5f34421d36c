package initializers_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// RedisConfig is the typed config of a user-defined "redis" initializer,
// decoded from [sandbox.sandboxes.NAME.extra] (its keys type-checked; other
// keys are warned about, not refused). Embedding Common accepts the keys
// every entry may carry.
type RedisConfig struct {
	initializers.Common
	Port      int    `toml:"port"`
	MaxMemory string `toml:"maxmemory"`
}

// Redis is the initializer for one entry. Embedding Generic gives no-op
// defaults for the methods it does not need (here: Handle).
type Redis struct {
	initializers.Generic
	cfg RedisConfig
}

// Spec is the default: the entry's own keys (image, ports, ...) win.
func (r *Redis) Spec() backend.Spec {
	return backend.Spec{
		Image:   "redis:7",
		Command: []string{"redis-server", "--port", strconv.Itoa(r.cfg.Port), "--maxmemory", r.cfg.MaxMemory},
		Ports:   []backend.Port{{Port: r.cfg.Port, Protocol: "tcp"}},
	}
}

// DependsOn: provisioned after the workspace is ready, if the session
// has one.
func (r *Redis) DependsOn() []initializers.Dependency {
	return []initializers.Dependency{{Name: "main", Optional: true}}
}

// Provision runs in the sandbox after it started.
func (r *Redis) Provision(ctx context.Context, in *initializers.Instance) error {
	in.Status("nothing to provision")
	return nil
}

// Ready: the port accepts and redis answers PING, each within a minute.
func (r *Redis) Ready() wait.Strategy {
	return wait.All(
		wait.ForListeningPort(r.cfg.Port).WithTimeout(time.Minute),
		wait.ForExec("redis-cli", "-p", strconv.Itoa(r.cfg.Port), "ping").WithTimeout(time.Minute),
	)
}

// Publish: what the other sandboxes of the session see, in their
// environment and in /shared/bashrc.
func (r *Redis) Publish(host string) map[string]string {
	return map[string]string{"REDIS_URL": "redis://" + net.JoinHostPort(host, strconv.Itoa(r.cfg.Port))}
}

// An initializer is a Factory in a Registry. A program adds its own to a
// registry holding the built-ins and passes it to the session launcher
// (session.Launcher{Initializers: reg}); an entry selects it with
// type = "redis", or by being named redis.
func Example() {
	reg := initializers.NewRegistry()
	initializers.Builtins(reg)
	reg.Register("redis", initializers.Factory{
		NewConfig: func() any { return &RedisConfig{Port: 6379, MaxMemory: "256mb"} },
		New: func(cfg any) (initializers.Initializer, error) {
			c := cfg.(*RedisConfig)
			if c.Port < 1 || c.Port > 65535 {
				return nil, fmt.Errorf("port %d: want 1-65535", c.Port)
			}
			return &Redis{cfg: *c}, nil
		},
	})

	// What the launcher does with an entry of type "redis" whose extra
	// table says port = 6380:
	f, _, _ := reg.Lookup("redis")
	cfg := f.NewConfig().(*RedisConfig)
	cfg.Port = 6380
	in, err := f.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(in.Spec().Command)
	fmt.Println(in.Publish("redis")["REDIS_URL"])
	fmt.Println(in.Ready())
	// Output:
	// [redis-server --port 6380 --maxmemory 256mb]
	// redis://redis:6380
	// tcp port 6380 and exec ["redis-cli" "-p" "6380" "ping"]
}
