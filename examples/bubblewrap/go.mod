module example.com/bubblewrap

go 1.26.0

require github.com/sandboxkit/sandboxkit v0.0.0

require (
	github.com/hashicorp/yamux v0.1.2 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/sandboxkit/sandboxkit => ../..
