package k8s

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
)

// EnvKubeconfig is the standard variable naming kubeconfig files (a list
// separated by ':' like kubectl reads it).
const EnvKubeconfig = "KUBECONFIG"

// OpenSage's variables for the cluster, read when the config (the
// [sandbox.k8s] table, then the entries' [extra]) leaves the setting empty;
// OPENSAGE_K8S_KUBECONFIG comes before KUBECONFIG.
const (
	EnvOpenSageNamespace  = "OPENSAGE_K8S_NAMESPACE"
	EnvOpenSageContext    = "OPENSAGE_K8S_CONTEXT"
	EnvOpenSageKubeconfig = "OPENSAGE_K8S_KUBECONFIG"
	// EnvOpenSageInitImage is the image of OpenSage's pods that fill
	// volumes: helper_image's fallback.
	EnvOpenSageInitImage = "OPENSAGE_K8S_INIT_IMAGE"
	// EnvOpenSagePVCSize is the size of OpenSage's claims: volume_size's
	// fallback.
	EnvOpenSagePVCSize = "OPENSAGE_K8S_PVC_SIZE"
)

// envOpenSageImageCache are OpenSage's settings of its k8s image cache
// (nerdctl commit on the node, and where it keeps manifests). sandboxkit
// does not commit pods' images: New warns, naming each one set.
var envOpenSageImageCache = []string{
	"OPENSAGE_K8S_NERDCTL", "OPENSAGE_K8S_CONTAINERD_SOCKET", "OPENSAGE_K8S_CONTAINERD_NAMESPACE", "OPENSAGE_K8S_CACHE_DIR",
}

// imageCacheWarnings says why OpenSage's image cache variables set in the
// environment do nothing here.
func imageCacheWarnings() []string {
	var out []string
	for _, env := range envOpenSageImageCache {
		if os.Getenv(env) != "" {
			out = append(out, "$"+env+" is set, but the k8s backend does not commit pods' images (OpenSage's nerdctl cache): "+
				"k8s sandboxes cannot be checkpointed, and the variable is not used")
		}
	}
	return out
}

// withEnv fills Kubeconfig, Context, Namespace, HelperImage and VolumeSize
// from OpenSage's variables where they are empty, and records which, so
// errors name the variable.
func (c Config) withEnv() Config {
	for _, x := range []struct {
		key, env string
		dst      *string
	}{
		{"kubeconfig", EnvOpenSageKubeconfig, &c.Kubeconfig},
		{"context", EnvOpenSageContext, &c.Context},
		{"namespace", EnvOpenSageNamespace, &c.Namespace},
		{"helper_image", EnvOpenSageInitImage, &c.HelperImage},
		{"volume_size", EnvOpenSagePVCSize, &c.VolumeSize},
	} {
		if v := os.Getenv(x.env); *x.dst == "" && v != "" {
			*x.dst = v
			if c.fromEnv == nil {
				c.fromEnv = map[string]string{}
			}
			c.fromEnv[x.key] = x.env
		}
	}
	return c
}

// invalid is the package's invalid for a key c may have taken from an
// environment variable, naming the variable then.
func (c Config) invalid(key, format string, args ...any) error {
	if env := c.fromEnv[key]; env != "" {
		return fmt.Errorf("%w: $%s (the [sandbox.k8s] %s): %s", backend.ErrInvalidConfig, env, key, fmt.Sprintf(format, args...))
	}
	return invalid(key, format, args...)
}

// Defaults of Config fields left at their zero value.
const (
	DefaultNamespace         = "default"
	DefaultVolumeSize        = "1Gi"
	DefaultStartTimeoutSec   = 180
	DefaultDeleteGraceSec    = 5
	DefaultRequestTimeoutSec = 30
	// DefaultHelperImage fills volumes from host folders (helper_image).
	DefaultHelperImage = "busybox:1.36"
)

// Config is the [sandbox.k8s] table. Every key is optional: with none, the
// backend uses OPENSAGE_K8S_KUBECONFIG, else KUBECONFIG, else
// ~/.kube/config, else the in-cluster service account, with
// OPENSAGE_K8S_CONTEXT, else the current context, and OPENSAGE_K8S_NAMESPACE,
// else that context's namespace, else "default".
type Config struct {
	// Kubeconfig is a kubeconfig file. Empty: OPENSAGE_K8S_KUBECONFIG,
	// else KUBECONFIG, else ~/.kube/config, else the in-cluster config (a
	// program running in a pod). OpenSage's extra.kubeconfig maps here.
	Kubeconfig string `toml:"kubeconfig"`
	// Context selects a kubeconfig context. Empty: OPENSAGE_K8S_CONTEXT,
	// else its current-context. OpenSage's extra.k8s_context maps here.
	Context string `toml:"context"`
	// Namespace holds every pod, claim and service the backend makes.
	// Empty: OPENSAGE_K8S_NAMESPACE, else the context's namespace, else
	// "default". OpenSage's extra.namespace maps here.
	Namespace string `toml:"namespace"`

	// ServiceAccount runs the pods under that service account. Empty: the
	// namespace's default, with no API token mounted (sandboxes run
	// untrusted code and need no access to the cluster).
	ServiceAccount string `toml:"service_account"`
	// RunAsUser and RunAsGroup run every pod's processes as these numeric
	// IDs (0: the image's user), for images that work without root.
	RunAsUser  int64 `toml:"run_as_user"`
	RunAsGroup int64 `toml:"run_as_group"`
	// RuntimeClass is the RuntimeClass of every pod ("gvisor", "kata", ...)
	// unless a sandbox entry names one in runtime.
	RuntimeClass string `toml:"runtime_class"`
	// RuntimeClasses lists further RuntimeClasses entries may pick with
	// runtime (besides RuntimeClass).
	RuntimeClasses []string `toml:"runtime_classes"`
	// NodeSelector and Tolerations place the pods.
	NodeSelector map[string]string `toml:"node_selector"`
	Tolerations  []Toleration      `toml:"tolerations"`
	// ImagePullSecrets names secrets in Namespace used to pull images.
	ImagePullSecrets []string `toml:"image_pull_secrets"`
	// ImagePullPolicy is "Always", "IfNotPresent" or "Never". Empty:
	// Kubernetes' default (Always for :latest and untagged images,
	// IfNotPresent otherwise). Images loaded on the nodes by hand (kind
	// load, ctr import) want IfNotPresent or Never.
	ImagePullPolicy string `toml:"image_pull_policy"`

	// StorageClass is the StorageClass of the claims made for named volumes
	// (empty: the cluster's default class).
	StorageClass string `toml:"storage_class"`
	// VolumeSize is the size requested for those claims. Empty:
	// OPENSAGE_K8S_PVC_SIZE, else "1Gi".
	VolumeSize string `toml:"volume_size"`
	// VolumeAccessMode is the claims' access mode: "ReadWriteOnce"
	// (default: every pod of a session on one node, which the scheduler
	// arranges) or "ReadWriteMany" (a class that supports it, such as NFS).
	VolumeAccessMode string `toml:"volume_access_mode"`
	// HelperImage runs the short-lived pod that fills a volume from a host
	// folder (CreateVolume with FromPath); it needs sh and tar. Empty:
	// OPENSAGE_K8S_INIT_IMAGE, else DefaultHelperImage. Clusters that
	// cannot pull it name a mirror.
	HelperImage string `toml:"helper_image"`

	// Service makes a ClusterIP Service per sandbox with ports, named as its
	// pod, for callers inside the cluster (Sandbox.ClusterAddress). Host
	// programs outside the cluster use Endpoint (a port forward) either
	// way.
	Service bool `toml:"service"`

	// StartTimeoutSec bounds how long Create waits for a pod to run
	// (default 180): scheduling, pulling the image, starting it.
	StartTimeoutSec int `toml:"start_timeout_sec"`
	// DeleteGraceSec is the grace period Destroy gives a pod's processes
	// between SIGTERM and SIGKILL (default 5; -1: immediate).
	DeleteGraceSec int `toml:"delete_grace_sec"`
	// RequestTimeoutSec bounds each plain API request (default 30); exec
	// and port-forward streams are bounded by their context only.
	RequestTimeoutSec int `toml:"request_timeout_sec"`

	// SbxdPath is a static sbxd binary for the nodes' architecture, used
	// instead of the embedded one (also: env SBX_SBXD_PATH).
	SbxdPath string `toml:"sbxd_path"`

	// Agent is how this process reaches sbxd in the pods it makes:
	// "auto" (default) connects straight to the pod's IP, with TLS on a
	// certificate made for that pod and a token (see internal/agenttls),
	// when the pod network answers there, else through the API server's
	// exec like "exec" always does. Pods with a command of their own,
	// an egress policy or network = "none", and pods another process
	// made, are always reached through exec.
	Agent string `toml:"agent"`

	// EgressDNS is the DNS server ("IP" or "IP:PORT") that the enforcers
	// of sandboxes with an egress policy ask for the names the policy
	// allows. Default: the pod's nameserver (the cluster's DNS).
	EgressDNS string `toml:"egress_dns"`

	// fromEnv maps the keys withEnv filled to their variables.
	fromEnv map[string]string
}

// Toleration is one entry of tolerations, with Kubernetes' field names in
// snake case.
type Toleration struct {
	Key      string `toml:"key"`
	Operator string `toml:"operator"` // "Equal" (default) or "Exists"
	Value    string `toml:"value"`
	Effect   string `toml:"effect"` // "NoSchedule", "PreferNoSchedule", "NoExecute" or "" (all)
	// TolerationSeconds applies to NoExecute (0: tolerate forever).
	TolerationSeconds int64 `toml:"toleration_seconds"`
}

func invalid(key, format string, args ...any) error {
	return fmt.Errorf("%w: [sandbox.k8s] %s: %s", backend.ErrInvalidConfig, key, fmt.Sprintf(format, args...))
}

// validate checks what can be checked without the cluster.
func (c Config) validate() error {
	var errs []error
	if _, ok := egressctl.DNSServer(c.EgressDNS); c.EgressDNS != "" && !ok {
		errs = append(errs, c.invalid("egress_dns", "%q: %s", c.EgressDNS, egressctl.DNSServerWant))
	}
	if c.Namespace != "" {
		if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
			errs = append(errs, c.invalid("namespace", "%q is not a namespace name: %s", c.Namespace, msgs[0]))
		}
	}
	for _, rc := range append([]string{c.RuntimeClass}, c.RuntimeClasses...) {
		if rc == "" {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(rc); len(msgs) > 0 {
			errs = append(errs, invalid("runtime_class", "%q is not a RuntimeClass name: %s", rc, msgs[0]))
		}
	}
	switch c.Agent {
	case "", "auto", "exec":
	default:
		errs = append(errs, invalid("agent", "%q: want \"auto\" or \"exec\"", c.Agent))
	}
	switch c.ImagePullPolicy {
	case "", string(corev1.PullAlways), string(corev1.PullIfNotPresent), string(corev1.PullNever):
	default:
		errs = append(errs, invalid("image_pull_policy", "%q: want %q, %q or %q",
			c.ImagePullPolicy, corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever))
	}
	if c.VolumeSize != "" {
		if _, err := resource.ParseQuantity(c.VolumeSize); err != nil {
			errs = append(errs, c.invalid("volume_size", "%q is not a quantity such as \"1Gi\"", c.VolumeSize))
		}
	}
	switch c.VolumeAccessMode {
	case "", string(corev1.ReadWriteOnce), string(corev1.ReadWriteMany):
	default:
		errs = append(errs, invalid("volume_access_mode", "%q: want %q or %q",
			c.VolumeAccessMode, corev1.ReadWriteOnce, corev1.ReadWriteMany))
	}
	for i, t := range c.Tolerations {
		key := fmt.Sprintf("tolerations[%d]", i)
		switch t.Operator {
		case "", string(corev1.TolerationOpEqual):
		case string(corev1.TolerationOpExists):
			if t.Value != "" {
				errs = append(errs, invalid(key, "operator Exists takes no value (remove value %q)", t.Value))
			}
		default:
			errs = append(errs, invalid(key, "operator %q: want Equal or Exists", t.Operator))
		}
		switch t.Effect {
		case "", string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute):
		default:
			errs = append(errs, invalid(key, "effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Effect))
		}
		if t.Key == "" && t.Operator != string(corev1.TolerationOpExists) {
			errs = append(errs, invalid(key, "an empty key needs operator Exists"))
		}
	}
	for k, v := range c.NodeSelector {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, invalid("node_selector", "key %q: %s", k, msgs[0]))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, invalid("node_selector", "value %q of %q: %s", v, k, msgs[0]))
		}
	}
	for _, s := range c.ImagePullSecrets {
		if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
			errs = append(errs, invalid("image_pull_secrets", "%q is not a secret name: %s", s, msgs[0]))
		}
	}
	if c.RunAsUser < 0 || c.RunAsGroup < 0 {
		errs = append(errs, invalid("run_as_user/run_as_group", "must not be negative"))
	}
	if c.StartTimeoutSec < 0 || c.RequestTimeoutSec < 0 {
		errs = append(errs, invalid("start_timeout_sec/request_timeout_sec", "must not be negative"))
	}
	return errors.Join(errs...)
}

func (c Config) startTimeout() time.Duration {
	if c.StartTimeoutSec == 0 {
		return DefaultStartTimeoutSec * time.Second
	}
	return time.Duration(c.StartTimeoutSec) * time.Second
}

func (c Config) requestTimeout() time.Duration {
	if c.RequestTimeoutSec == 0 {
		return DefaultRequestTimeoutSec * time.Second
	}
	return time.Duration(c.RequestTimeoutSec) * time.Second
}

func (c Config) deleteGrace() int64 {
	switch {
	case c.DeleteGraceSec == 0:
		return DefaultDeleteGraceSec
	case c.DeleteGraceSec < 0:
		return 0
	}
	return int64(c.DeleteGraceSec)
}

func (c Config) volumeSize() resource.Quantity {
	if c.VolumeSize == "" {
		return resource.MustParse(DefaultVolumeSize)
	}
	return resource.MustParse(c.VolumeSize)
}

func (c Config) helperImage() string {
	if c.HelperImage == "" {
		return DefaultHelperImage
	}
	return c.HelperImage
}

func (c Config) volumeAccessMode() corev1.PersistentVolumeAccessMode {
	if c.VolumeAccessMode == "" {
		return corev1.ReadWriteOnce
	}
	return corev1.PersistentVolumeAccessMode(c.VolumeAccessMode)
}

func (c Config) tolerations() []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range c.Tolerations {
		kt := corev1.Toleration{
			Key:      t.Key,
			Operator: corev1.TolerationOperator(t.Operator),
			Value:    t.Value,
			Effect:   corev1.TaintEffect(t.Effect),
		}
		if t.TolerationSeconds != 0 {
			kt.TolerationSeconds = &t.TolerationSeconds
		}
		out = append(out, kt)
	}
	return out
}

// restConfig loads the client configuration and the namespace to use:
// Kubeconfig, else KUBECONFIG, else ~/.kube/config, else in-cluster.
func (c Config) restConfig() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	source := "KUBECONFIG or ~/.kube/config"
	if c.Kubeconfig != "" {
		if rest, ok := strings.CutPrefix(c.Kubeconfig, "~/"); ok {
			if home, err := os.UserHomeDir(); err == nil {
				c.Kubeconfig = filepath.Join(home, rest)
			}
		}
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			return nil, "", c.invalid("kubeconfig", "%v (point it at a kubeconfig file, or leave it empty for KUBECONFIG / ~/.kube/config)", err)
		}
		rules.ExplicitPath = c.Kubeconfig
		source = c.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c.Context}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	// Without any kubeconfig file the loader falls back to the in-cluster
	// config itself.
	cfg, err := loader.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			home, _ := os.UserHomeDir()
			return nil, "", fmt.Errorf("%w: [sandbox.k8s]: no cluster configured: no kubeconfig in %s, %s or %s, and not running in a pod (set kubeconfig, or KUBECONFIG)",
				backend.ErrInvalidConfig, EnvKubeconfig, filepath.Join(home, ".kube", "config"), "the in-cluster service account")
		}
		key := "kubeconfig"
		if c.Context != "" {
			key = "context"
		}
		return nil, "", c.invalid(key, "loading %s: %v", source, err)
	}
	ns := c.Namespace
	if ns == "" {
		if n, _, err := loader.Namespace(); err == nil && n != "" {
			ns = n
		} else {
			ns = DefaultNamespace
		}
	}
	return cfg, ns, nil
}

// TolerationsFromMaps converts tolerations written as TOML tables with
// Kubernetes' own field names (OpenSage's [sandbox] tolerations: key,
// operator, value, effect, tolerationSeconds; snake case accepted too).
// Unknown fields are errors naming the entry and the field.
func TolerationsFromMaps(ms []map[string]any) ([]Toleration, error) {
	var out []Toleration
	for i, m := range ms {
		var t Toleration
		for k, v := range m {
			where := fmt.Sprintf("tolerations[%d].%s", i, k)
			switch k {
			case "key", "operator", "value", "effect":
				s, ok := v.(string)
				if !ok {
					return nil, fmt.Errorf("%w: [sandbox] %s: want a string, got %T", backend.ErrInvalidConfig, where, v)
				}
				switch k {
				case "key":
					t.Key = s
				case "operator":
					t.Operator = s
				case "value":
					t.Value = s
				case "effect":
					t.Effect = s
				}
			case "tolerationSeconds", "toleration_seconds":
				switch n := v.(type) {
				case int64:
					t.TolerationSeconds = n
				case int:
					t.TolerationSeconds = int64(n)
				case string:
					x, err := strconv.ParseInt(n, 10, 64)
					if err != nil {
						return nil, fmt.Errorf("%w: [sandbox] %s: %q is not a number of seconds", backend.ErrInvalidConfig, where, n)
					}
					t.TolerationSeconds = x
				default:
					return nil, fmt.Errorf("%w: [sandbox] %s: want a number of seconds, got %T", backend.ErrInvalidConfig, where, v)
				}
			default:
				return nil, fmt.Errorf("%w: [sandbox] %s: unknown field (known: key, operator, value, effect, tolerationSeconds)", backend.ErrInvalidConfig, where)
			}
		}
		out = append(out, t)
	}
	return out, nil
}
