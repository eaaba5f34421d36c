package sandboxkit_test

import (
	"fmt"
	"log"

	"github.com/sandboxkit/sandboxkit"
)

func ExampleParseConfig() {
	data := []byte(`
DEMO_HTTP_PORT = 18080                # a template variable
task_name = "demo"                    # not sandboxkit's: ignored

[sandbox]
backend = "local"
default_image = "python:3.13-slim"

[sandbox.sandboxes.main]
command = "python3 -m http.server 8000"
mem_limit = "512m"
cpus = "1.5"
volumes = ["pip-cache:/root/.cache/pip"]
[sandbox.sandboxes.main.environment]
WORKERS = 4
[sandbox.sandboxes.main.ports]
"8000/tcp" = "${DEMO_HTTP_PORT}"
`)
	cfg, err := sandboxkit.ParseConfig(data, "")
	if err != nil {
		log.Fatal(err)
	}
	spec, err := cfg.Spec("main")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("backend:", cfg.Sandbox.Backend)
	fmt.Println("image:", spec.Image)
	fmt.Printf("command: %q\n", spec.Command)
	fmt.Println("memory:", spec.Resources.MemoryBytes, "cpus:", spec.Resources.CPUs)
	fmt.Println("env:", spec.Env)
	fmt.Printf("volume: %s %s -> %s\n", spec.Volumes[0].Type, spec.Volumes[0].Source, spec.Volumes[0].Target)
	fmt.Printf("port: %d/%s on host port %d\n", spec.Ports[0].Port, spec.Ports[0].Protocol, spec.Ports[0].HostPort)
	fmt.Println("ttl:", spec.TTL)

	// A misspelt key is an error that names it.
	_, err = sandboxkit.ParseConfig([]byte("[sandbox.sandboxes.main]\nimgae = \"alpine\"\n"), "sandbox.toml")
	fmt.Println(err)
	// Output:
	// backend: local
	// image: python:3.13-slim
	// command: ["python3" "-m" "http.server" "8000"]
	// memory: 536870912 cpus: 1.5
	// env: map[WORKERS:4]
	// volume: volume pip-cache -> /root/.cache/pip
	// port: 8000/tcp on host port 18080
	// ttl: 24h0m0s
	// config sandbox.toml: unknown key "sandbox.sandboxes.main.imgae" (did you mean "image"?)
}
