package k8s

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// kubeAPI is the part of the Kubernetes API the backend uses: the core
// group's pods, claims, services, events and nodes, and network policies.
// Its methods have the signatures of client-go's typed clients, so a
// clientset (the fake one of the unit tests) serves it through a thin
// adapter; the backend's own (newKube) is a REST client for these two
// groups alone. client-go's full clientset registers every built-in API
// group at package initialisation, which every sbx command paid for
// (about 2.5 ms of each process, with the packages it pulls in; issue 38).
type kubeAPI interface {
	Pods(ns string) podAPI
	PersistentVolumeClaims(ns string) resourceAPI[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList]
	Services(ns string) resourceAPI[*corev1.Service, *corev1.ServiceList]
	Events(ns string) resourceAPI[*corev1.Event, *corev1.EventList]
	Nodes() resourceAPI[*corev1.Node, *corev1.NodeList]
	NetworkPolicies(ns string) resourceAPI[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList]
	// CoreREST is the REST client of the core group (subresources
	// such as exec and port-forward).
	CoreREST() rest.Interface
}

// resourceAPI is what the backend does with one kind of object.
type resourceAPI[T, L runtime.Object] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// podAPI adds a pod's log.
type podAPI interface {
	resourceAPI[*corev1.Pod, *corev1.PodList]
	GetLogs(name string, opts *corev1.PodLogOptions) *rest.Request
}

// kubeScheme knows the types of the two groups, made at first use (not at
// package initialisation).
var kubeScheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // static registrations: a bug of this build
		}
	}
	return s
})

// parameterCodec encodes request options (PodExecOptions, ListOptions,
// ...) as query parameters.
var parameterCodec = sync.OnceValue(func() runtime.ParameterCodec { return runtime.NewParameterCodec(kubeScheme()) })

// restKube is kubeAPI over one REST client per group, sharing the HTTP
// client and one rate limiter (as a clientset does).
type restKube struct{ core, networking rest.Interface }

// newKube makes the REST clients for rc.
func newKube(rc *rest.Config) (*restKube, error) {
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	limiter := rc.RateLimiter
	if limiter == nil && rc.QPS > 0 {
		limiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	codecs := serializer.NewCodecFactory(kubeScheme()).WithoutConversion()
	client := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(rc)
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = codecs
		c.RateLimiter = limiter
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientForConfigAndClient(c, hc)
	}
	core, err := client(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	networking, err := client(networkingv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &restKube{core: core, networking: networking}, nil
}

func (k *restKube) CoreREST() rest.Interface { return k.core }

func (k *restKube) Pods(ns string) podAPI {
	return pods{typed[*corev1.Pod, *corev1.PodList]{k.core, ns, "pods", newObj[corev1.Pod], newObj[corev1.PodList]}}
}

func (k *restKube) PersistentVolumeClaims(ns string) resourceAPI[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList] {
	return typed[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList]{k.core, ns, "persistentvolumeclaims", newObj[corev1.PersistentVolumeClaim], newObj[corev1.PersistentVolumeClaimList]}
}

func (k *restKube) Services(ns string) resourceAPI[*corev1.Service, *corev1.ServiceList] {
	return typed[*corev1.Service, *corev1.ServiceList]{k.core, ns, "services", newObj[corev1.Service], newObj[corev1.ServiceList]}
}

func (k *restKube) Events(ns string) resourceAPI[*corev1.Event, *corev1.EventList] {
	return typed[*corev1.Event, *corev1.EventList]{k.core, ns, "events", newObj[corev1.Event], newObj[corev1.EventList]}
}

func (k *restKube) Nodes() resourceAPI[*corev1.Node, *corev1.NodeList] {
	return typed[*corev1.Node, *corev1.NodeList]{k.core, "", "nodes", newObj[corev1.Node], newObj[corev1.NodeList]}
}

func (k *restKube) NetworkPolicies(ns string) resourceAPI[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList] {
	return typed[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList]{k.networking, ns, "networkpolicies", newObj[networkingv1.NetworkPolicy], newObj[networkingv1.NetworkPolicyList]}
}

func newObj[T any]() *T { return new(T) }

// typed is resourceAPI for one resource of a group: the requests
// client-go's generated clients make (ns "" for a cluster-scoped one).
type typed[T, L runtime.Object] struct {
	c        rest.Interface
	ns       string
	resource string
	obj      func() T
	list     func() L
}

func (r typed[T, L]) req(verb *rest.Request) *rest.Request {
	return verb.NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource)
}

func (r typed[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.obj()
	err := r.req(r.c.Post()).VersionedParams(&opts, parameterCodec()).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (r typed[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.obj()
	err := r.req(r.c.Get()).Name(name).VersionedParams(&opts, parameterCodec()).Do(ctx).Into(out)
	return out, err
}

func (r typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.list()
	req := r.req(r.c.Get()).VersionedParams(&opts, parameterCodec())
	if opts.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	err := req.Do(ctx).Into(out)
	return out, err
}

func (r typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	req := r.req(r.c.Get()).VersionedParams(&opts, parameterCodec())
	if opts.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return req.Watch(ctx)
}

func (r typed[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := r.obj()
	err := r.req(r.c.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, parameterCodec()).Body(data).Do(ctx).Into(out)
	return out, err
}

func (r typed[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.req(r.c.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

// pods adds the log subresource.
type pods struct {
	typed[*corev1.Pod, *corev1.PodList]
}

func (p pods) GetLogs(name string, opts *corev1.PodLogOptions) *rest.Request {
	return p.req(p.c.Get()).Name(name).SubResource("log").VersionedParams(opts, parameterCodec())
}
