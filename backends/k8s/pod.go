package k8s

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxkit/sandboxkit/backend"
)

// sbxdDir is where Create puts sbxd in a pod: an emptyDir volume, so it
// works with a read-only root file system and any image.
const (
	sbxdDir  = "/.sbx"
	sbxdPath = sbxdDir + "/sbxd"
)

// keepAlive is the main process of a pod whose entry has no command: it
// waits for Create to put sbxd in place, then becomes sbxd init, which
// reaps the orphans of killed commands and ends at SIGTERM. Until then the
// shell ends at SIGTERM itself, so deleting the pod never waits for its
// grace period.
const keepAlive = `trap 'exit 0' TERM INT
while [ ! -x ` + sbxdPath + ` ]; do sleep 1 & wait $!; done
exec ` + sbxdPath + ` init`

// agentFile is where Create puts the credentials of a pod's directly
// reachable agent (see Config.Agent), readable by the pod's user only.
const agentFile = sbxdDir + "/agent"

// keepAliveAgent is keepAlive whose sbxd init also serves the agent over
// TLS on the pod's network, with the credentials in agentFile, for the
// sandbox id.
// It wakes at SIGUSR1, which the inject script sends once sbxd is in
// place, instead of looking again a second later: the client connects
// right after Create.
func keepAliveAgent(id string) string {
	return "trap : USR1\n" + keepAlive + " --agent-tls " + agentFile + " --sandbox " + id
}

// refuseUnsupported names, with the reason, what a Spec asks that no pod
// can do (Capabilities.Check's message cannot say why).
func refuseUnsupported(spec backend.Spec) error {
	if spec.Resources.PidsLimit != 0 {
		return fmt.Errorf("%w: pids_limit = %d: Kubernetes has no per-pod process limit (the kubelet's podPidsLimit sets one for every pod of a node: ask the cluster's admin), so the k8s backend cannot honour it; remove pids_limit from the entry",
			errors.ErrUnsupported, spec.Resources.PidsLimit)
	}
	if spec.Build != nil {
		return fmt.Errorf("%w: dockerfile build: the k8s backend runs images from a registry the nodes can pull; build and push %q first (docker build, docker push), or use the native backend",
			errors.ErrUnsupported, spec.Image)
	}
	return nil
}

// GPUResource is the extended resource a Spec's gpus asks for.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// podFor builds the pod of a sandbox.
func (b *Backend) podFor(id string, spec backend.Spec) (*corev1.Pod, error) {
	all := sandboxLabels(id, spec)
	annotations := map[string]string{annotationLabels: encodeLabels(all)}
	if spec.WorkingDir != "" {
		if !path.IsAbs(spec.WorkingDir) {
			return nil, fmt.Errorf("%w: working_dir %q: want an absolute path", backend.ErrInvalidConfig, spec.WorkingDir)
		}
		annotations[annotationWorkDir] = path.Clean(spec.WorkingDir)
	}

	c := corev1.Container{
		Name:            containerName,
		Image:           spec.Image,
		ImagePullPolicy: corev1.PullPolicy(b.cfg.ImagePullPolicy),
		WorkingDir:      spec.WorkingDir,
	}
	switch {
	case spec.ImageCommand:
	case spec.Command != nil:
		c.Command = spec.Command
	case b.directAgent(spec):
		c.Command = []string{"/bin/sh", "-c", keepAliveAgent(id)}
	default:
		c.Command = []string{"/bin/sh", "-c", keepAlive}
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	ports, hostPorts, err := portsFor(spec.Ports)
	if err != nil {
		return nil, err
	}
	c.Ports = ports
	if hostPorts != "" {
		annotations[annotationHostPorts] = hostPorts
	}
	if c.Resources, err = resourcesFor(spec.Resources); err != nil {
		return nil, err
	}
	if c.SecurityContext, err = b.securityContext(spec); err != nil {
		return nil, err
	}
	volumes, mounts, err := volumesFor(spec)
	if err != nil {
		return nil, err
	}
	c.VolumeMounts = mounts

	ps := b.podSpec(c, volumes)
	if spec.Egress != nil {
		if err := b.addEnforcer(&ps, &ps.Containers[0], spec); err != nil {
			return nil, err
		}
	}
	if err := applyNetwork(&ps, spec.Network); err != nil {
		return nil, err
	}
	if err := applyHosts(&ps, spec); err != nil {
		return nil, err
	}
	rc, err := b.podClass(spec)
	if err != nil {
		return nil, err
	}
	if rc != "" {
		ps.RuntimeClassName = &rc
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        id,
			Namespace:   b.ns,
			Labels:      podLabels(all),
			Annotations: annotations,
		},
		Spec: ps,
	}, nil
}

// sandboxLabels is every label of sandbox id: the entry's and sandboxkit's
// (see annotationLabels for how a pod carries them).
func sandboxLabels(id string, spec backend.Spec) map[string]string {
	all := maps.Clone(spec.Labels)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, map[string]string{
		backend.LabelID:      id,
		backend.LabelBackend: Name,
		backend.LabelName:    spec.Name,
		backend.LabelSession: spec.Session,
	})
	if spec.TTL > 0 {
		all[backend.LabelExpiresAt] = now().Add(spec.TTL).UTC().Format(time.RFC3339)
	}
	if spec.Owner != "" {
		all[backend.LabelOwner] = spec.Owner
	}
	return all
}

// portsFor is the container's ports and, for those published on a host
// port, the value of the host-ports annotation ("port=host:port,...").
func portsFor(ports []backend.Port) ([]corev1.ContainerPort, string, error) {
	var out []corev1.ContainerPort
	var hostPorts []string
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		switch strings.ToLower(p.Protocol) {
		case "", "tcp":
		case "udp":
			proto = corev1.ProtocolUDP
		default:
			return nil, "", fmt.Errorf("%w: port %d: protocol %q: want tcp or udp", backend.ErrInvalidConfig, p.Port, p.Protocol)
		}
		if p.Port <= 0 || p.Port > 65535 {
			return nil, "", fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, p.Port)
		}
		if p.HostPort != 0 || p.HostIP != "" {
			if proto != corev1.ProtocolTCP {
				return nil, "", fmt.Errorf("%w: port %d/udp with a host port: the k8s backend publishes ports by port-forwarding through the API server, which carries TCP only",
					errors.ErrUnsupported, p.Port)
			}
			if p.HostPort < 0 || p.HostPort > 65535 || (p.HostIP != "" && net.ParseIP(p.HostIP) == nil) {
				return nil, "", fmt.Errorf("%w: port %d: host address %q: want an IP address and a port up to 65535",
					backend.ErrInvalidConfig, p.Port, net.JoinHostPort(p.HostIP, strconv.Itoa(p.HostPort)))
			}
			hostPorts = append(hostPorts, fmt.Sprintf("%d=%s", p.Port, net.JoinHostPort(cmpOr(p.HostIP, "127.0.0.1"), strconv.Itoa(p.HostPort))))
		}
		out = append(out, corev1.ContainerPort{ContainerPort: int32(p.Port), Protocol: proto})
	}
	return out, strings.Join(hostPorts, ","), nil
}

// securityContext is the container's security context: the entry's
// privileges and capabilities, run as the entry's user, else as the
// backend's run_as_user and run_as_group.
func (b *Backend) securityContext(spec backend.Spec) (*corev1.SecurityContext, error) {
	sc, err := securityFor(spec)
	if err != nil {
		return nil, err
	}
	if b.cfg.RunAsUser > 0 {
		uid := b.cfg.RunAsUser
		sc.RunAsUser = &uid
	}
	if b.cfg.RunAsGroup > 0 {
		gid := b.cfg.RunAsGroup
		sc.RunAsGroup = &gid
	}
	// The entry's user wins over the backend's run_as_user.
	uid, gid, err := podUser(spec.User)
	if err != nil {
		return nil, err
	}
	if uid != nil {
		sc.RunAsUser = uid
		sc.RunAsGroup = gid
	}
	return sc, nil
}

// volumesFor is the pod's volumes and the container's mounts of them: the
// emptyDir sbxd goes in, the entry's volumes (a named volume is a
// PersistentVolumeClaim, a bind a hostPath on the node) and /dev/shm when
// the entry sizes it.
func volumesFor(spec backend.Spec) ([]corev1.Volume, []corev1.VolumeMount, error) {
	volumes := []corev1.Volume{{Name: "sbx", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mounts := []corev1.VolumeMount{{Name: "sbx", MountPath: sbxdDir}}
	for i, v := range spec.Volumes {
		name := "vol-" + strconv.Itoa(i)
		if !path.IsAbs(v.Target) {
			return nil, nil, fmt.Errorf("%w: volume %q: the target must be an absolute path", backend.ErrInvalidConfig, v.Source+":"+v.Target)
		}
		var src corev1.VolumeSource
		switch v.Type {
		case backend.VolumeNamed:
			claim, err := claimName(v.Source)
			if err != nil {
				return nil, nil, err
			}
			src.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: v.ReadOnly}
		default:
			if !path.IsAbs(v.Source) {
				return nil, nil, fmt.Errorf("%w: volume %q: a bind source must be an absolute path on the node", backend.ErrInvalidConfig, v.Source+":"+v.Target)
			}
			src.HostPath = &corev1.HostPathVolumeSource{Path: v.Source}
		}
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: src})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: v.Target, ReadOnly: v.ReadOnly})
	}
	if spec.Resources.ShmBytes > 0 {
		size := resource.NewQuantity(spec.Resources.ShmBytes, resource.BinarySI)
		volumes = append(volumes, corev1.Volume{Name: "shm", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: size}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "shm", MountPath: "/dev/shm"})
	}
	return volumes, mounts, nil
}

// podSpec is the spec of a pod running c with volumes, with the backend's
// settings for every pod (scheduling, service account, pull secrets).
func (b *Backend) podSpec(c corev1.Container, volumes []corev1.Volume) corev1.PodSpec {
	grace := b.cfg.deleteGrace()
	no := false
	ps := corev1.PodSpec{
		Containers:                    []corev1.Container{c},
		Volumes:                       volumes,
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: &grace,
		EnableServiceLinks:            &no,
		NodeSelector:                  maps.Clone(b.cfg.NodeSelector),
		Tolerations:                   b.cfg.tolerations(),
		ServiceAccountName:            b.cfg.ServiceAccount,
	}
	if b.cfg.ServiceAccount == "" {
		// Untrusted code gets no API token unless a service account is
		// configured on purpose.
		ps.AutomountServiceAccountToken = &no
	}
	for _, s := range b.cfg.ImagePullSecrets {
		ps.ImagePullSecrets = append(ps.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return ps
}

// applyHosts sets the pod's hostname (a DNS label) and its extra /etc/hosts
// entries ("name:ip", as docker run --add-host takes them) as host
// aliases, one per address in the order given.
func applyHosts(ps *corev1.PodSpec, spec backend.Spec) error {
	if h := spec.Hostname; h != "" {
		if errs := validation.IsDNS1123Label(h); len(errs) > 0 {
			return fmt.Errorf("%w: hostname %q: a pod's hostname is a DNS label: %s", backend.ErrInvalidConfig, h, strings.Join(errs, "; "))
		}
		if ps.HostNetwork {
			return fmt.Errorf("%w: hostname %q: a pod on the host's network (network = \"host\") has the node's hostname", errors.ErrUnsupported, h)
		}
		ps.Hostname = h
	}
	byIP := map[string]int{}
	for _, e := range spec.ExtraHosts {
		name, ip, ok := strings.Cut(e, ":")
		if i := strings.IndexByte(e, '='); i > 0 && (!ok || i < len(name)) {
			name, ip, ok = e[:i], e[i+1:], true
		}
		switch {
		case !ok || name == "":
			return fmt.Errorf("%w: extra_hosts %q: want name:ip", backend.ErrInvalidConfig, e)
		case ip == "host-gateway":
			return fmt.Errorf("%w: extra_hosts %q: the k8s backend has no host-gateway address (name the node's address instead)", errors.ErrUnsupported, e)
		case net.ParseIP(strings.Trim(ip, "[]")) == nil:
			return fmt.Errorf("%w: extra_hosts %q: %q is not an IP address", backend.ErrInvalidConfig, e, ip)
		}
		ip = strings.Trim(ip, "[]")
		i, seen := byIP[ip]
		if !seen {
			i = len(ps.HostAliases)
			byIP[ip] = i
			ps.HostAliases = append(ps.HostAliases, corev1.HostAlias{IP: ip})
		}
		ps.HostAliases[i].Hostnames = append(ps.HostAliases[i].Hostnames, name)
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func resourcesFor(r backend.Resources) (corev1.ResourceRequirements, error) {
	limits := corev1.ResourceList{}
	if r.CPUs < 0 || r.MemoryBytes < 0 {
		return corev1.ResourceRequirements{}, fmt.Errorf("%w: cpus and mem_limit must not be negative", backend.ErrInvalidConfig)
	}
	if r.CPUs > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(r.CPUs*1000+0.5), resource.DecimalSI)
	}
	if r.MemoryBytes > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(r.MemoryBytes, resource.BinarySI)
	}
	if r.GPUs != "" {
		n, err := strconv.Atoi(r.GPUs)
		if err != nil || n <= 0 {
			return corev1.ResourceRequirements{}, fmt.Errorf("%w: the k8s backend cannot honour gpus %q: Kubernetes schedules a number of GPUs (write gpus = \"1\"), not \"all\" or device IDs",
				errors.ErrUnsupported, r.GPUs)
		}
		limits[GPUResource] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	if len(limits) == 0 {
		return corev1.ResourceRequirements{}, nil
	}
	// Requests default to the limits, so a sandbox gets what it is
	// allowed (Guaranteed QoS when both CPU and memory are set).
	return corev1.ResourceRequirements{Limits: limits}, nil
}

// securityFor is the container's security context: no privilege
// escalation (setuid programs) unless the entry is privileged.
func securityFor(spec backend.Spec) (*corev1.SecurityContext, error) {
	escalate := spec.Privileged
	sc := &corev1.SecurityContext{AllowPrivilegeEscalation: &escalate}
	if spec.Privileged {
		yes := true
		sc.Privileged = &yes
	}
	if spec.ReadOnlyRootfs {
		yes := true
		sc.ReadOnlyRootFilesystem = &yes
	}
	for _, o := range spec.SecurityOpt {
		// Docker writes key=value or key:value.
		k, v, _ := strings.Cut(strings.Replace(o, ":", "=", 1), "=")
		switch {
		case k == "no-new-privileges" && (v == "" || v == "true"):
			if spec.Privileged {
				return nil, fmt.Errorf("%w: security_opt %q with privileged = true: Kubernetes refuses a privileged container without privilege escalation",
					backend.ErrInvalidConfig, o)
			}
		case k == "seccomp" && v == "unconfined":
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		case k == "apparmor" && v == "unconfined":
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		default:
			return nil, fmt.Errorf("%w: security_opt %q: the k8s backend maps no-new-privileges (its default), seccomp=unconfined and apparmor=unconfined; profiles from files must be installed on the nodes and named in the pod, which sandboxkit does not do",
				errors.ErrUnsupported, o)
		}
	}
	if len(spec.CapAdd) > 0 || len(spec.CapDrop) > 0 {
		sc.Capabilities = &corev1.Capabilities{}
		for _, c := range spec.CapAdd {
			sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(capName(c)))
		}
		for _, c := range spec.CapDrop {
			sc.Capabilities.Drop = append(sc.Capabilities.Drop, corev1.Capability(capName(c)))
		}
	}
	return sc, nil
}

// capName turns Docker's spelling (CAP_NET_ADMIN, net_admin) into
// Kubernetes' (NET_ADMIN).
func capName(c string) string {
	return strings.TrimPrefix(strings.ToUpper(c), "CAP_")
}

// claimName is the PersistentVolumeClaim of a named volume.
func claimName(source string) (string, error) {
	if msgs := validation.IsDNS1123Subdomain(source); len(msgs) > 0 {
		return "", fmt.Errorf("%w: volume %q: a named volume of the k8s backend is a PersistentVolumeClaim name (lower case letters, digits, '-' and '.'): %s",
			backend.ErrInvalidConfig, source, msgs[0])
	}
	return source, nil
}

// claimsFor makes the claims of spec's named volumes that do not exist yet
// and returns the names of those it made: they belong to the sandbox and go
// with its pod (see ownClaims). Existing claims (a session's shared
// volumes, made by CreateVolume) are used as they are.
func (b *Backend) claimsFor(ctx context.Context, spec backend.Spec) ([]string, error) {
	var made []string
	for _, v := range spec.Volumes {
		if v.Type != backend.VolumeNamed {
			continue
		}
		name, err := claimName(v.Source)
		if err != nil {
			return nil, err
		}
		err = b.createClaim(ctx, name, map[string]string{
			backend.LabelBackend: Name,
			backend.LabelSession: spec.Session,
			labelVolume:          name,
		})
		switch {
		case errors.Is(err, backend.ErrAlreadyExists):
		case err != nil:
			b.deleteClaims(context.WithoutCancel(ctx), made)
			return nil, fmt.Errorf("volume %q: %w", v.Source+":"+v.Target, err)
		default:
			made = append(made, name)
		}
	}
	return made, nil
}

// ownClaims makes the pod the owner of the claims Create made for it, so
// deleting the pod deletes them (Kubernetes' garbage collector).
func (b *Backend) ownClaims(ctx context.Context, pod *corev1.Pod, claims []string) error {
	for _, name := range claims {
		patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q}]}}`, pod.Name, pod.UID)
		rctx, cancel := b.reqCtx(ctx)
		_, err := b.kube.PersistentVolumeClaims(b.ns).Patch(rctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		cancel()
		if err != nil {
			b.deleteClaims(context.WithoutCancel(ctx), claims)
			return fmt.Errorf("claim %s: %w", name, b.translate(err))
		}
	}
	return nil
}

func (b *Backend) deleteClaims(ctx context.Context, names []string) {
	for _, name := range names {
		rctx, cancel := b.reqCtx(ctx)
		err := b.kube.PersistentVolumeClaims(b.ns).Delete(rctx, name, metav1.DeleteOptions{})
		cancel()
		if err := b.translate(err); err != nil && !errors.Is(err, backend.ErrNotFound) {
			b.log.Warn("removing a volume claim failed", "claim", name, "err", err)
		}
	}
}

// ownedBy is the metadata of an object that belongs to pod: named as the
// pod, labelled with its sandbox ID, and owned by it, so it goes with the
// pod.
func (b *Backend) ownedBy(pod *corev1.Pod) metav1.ObjectMeta {
	yes := true
	return metav1.ObjectMeta{
		Name:      pod.Name,
		Namespace: b.ns,
		Labels:    map[string]string{backend.LabelID: pod.Name, backend.LabelBackend: Name},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, BlockOwnerDeletion: &yes,
		}},
	}
}

// createService makes the ClusterIP Service of a pod with ports: named as
// the pod, selecting it by sandboxkit.id, owned by it (so it goes with the
// pod).
func (b *Backend) createService(ctx context.Context, pod *corev1.Pod) error {
	svc := &corev1.Service{
		ObjectMeta: b.ownedBy(pod),
		Spec:       corev1.ServiceSpec{Selector: map[string]string{backend.LabelID: pod.Name}},
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
				Name:     strings.ToLower(string(p.Protocol)) + "-" + strconv.Itoa(int(p.ContainerPort)),
				Protocol: p.Protocol,
				Port:     p.ContainerPort,
			})
		}
	}
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	_, err := b.kube.Services(b.ns).Create(rctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("service %s: %w", pod.Name, b.translate(err))
	}
	return nil
}
