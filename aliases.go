package sandboxkit

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/session"
)

// The names below moved to the config and session packages (see the
// migration section of docs/layout.md). They stay here, as aliases, so that
// programs written against the root package keep compiling.

// Config names.
type (
	Config        = config.Config
	SandboxConfig = config.SandboxConfig
	ToolsConfig   = config.ToolsConfig
	PathsConfig   = config.PathsConfig
	ServeConfig   = config.ServeConfig
	Entry         = config.Entry
	PortBinding   = config.PortBinding
	ByteSize      = config.ByteSize
	Registry      = config.Registry
	// BackendFactory is a backend's factory, now exported by each backend
	// package (local.Factory, ...).
	BackendFactory = backend.Factory
)

const (
	EnvConfig             = config.EnvConfig
	DefaultConfigFile     = config.DefaultConfigFile
	DefaultBackend        = config.DefaultBackend
	DefaultTTL            = config.DefaultTTL
	DefaultExecuteTimeout = config.DefaultExecuteTimeout
)

// NewRegistry returns an empty registry; see config.NewRegistry.
func NewRegistry() *config.Registry { return config.NewRegistry() }

// DefaultBuildImage: see config.DefaultBuildImage.
func DefaultBuildImage(name string) string { return config.DefaultBuildImage(name) }

// ParseVolumeSpec: see config.ParseVolumeSpec.
func ParseVolumeSpec(spec, dir string) (backend.Volume, string, error) {
	return config.ParseVolumeSpec(spec, dir)
}

// Session names.
type (
	Launcher        = session.Launcher
	Session         = session.Session
	Member          = session.Member
	Manifest        = session.Manifest
	ManifestSandbox = session.ManifestSandbox
	SessionError    = session.Error
	SessionProgress = session.Progress
	BundleOptions   = session.BundleOptions
)

const (
	LabelMembers              = session.LabelMembers
	LabelType                 = session.LabelType
	EnvFile                   = session.EnvFile
	DefaultInitializerTimeout = session.DefaultInitializerTimeout
	StepCreating              = session.StepCreating
	StepPulling               = session.StepPulling
	StepStarted               = session.StepStarted
	StepWaiting               = session.StepWaiting
	StepProvisioning          = session.StepProvisioning
	StepProbing               = session.StepProbing
	StepReady                 = session.StepReady
	StepFailed                = session.StepFailed
)

// Launch launches a session; see session.Launch.
func Launch(ctx context.Context, cfg *config.Config, names ...string) (*session.Session, error) {
	return session.Launch(ctx, cfg, names...)
}

// Resume reattaches to a running session; see session.Resume.
func Resume(ctx context.Context, cfg *config.Config, id string) (*session.Session, error) {
	return session.Resume(ctx, cfg, id)
}

// DestroySession removes a session's resources; see session.Destroy.
func DestroySession(ctx context.Context, b backend.Backend, id string) error {
	return session.Destroy(ctx, b, id)
}

// LoadManifest reads a checkpoint manifest; see session.LoadManifest.
func LoadManifest(path string) (*session.Manifest, error) { return session.LoadManifest(path) }

// HandleOf returns a sandbox's typed handle; see session.HandleOf.
func HandleOf[T any](s *session.Session, name string) (T, error) { return session.HandleOf[T](s, name) }
