package k8s

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// clientsetKube serves kubeAPI from a clientset (the unit tests' fake one):
// the typed clients have the methods kubeAPI names.
type clientsetKube struct{ cs kubernetes.Interface }

func (k clientsetKube) Pods(ns string) podAPI { return k.cs.CoreV1().Pods(ns) }
func (k clientsetKube) PersistentVolumeClaims(ns string) resourceAPI[*corev1.PersistentVolumeClaim, *corev1.PersistentVolumeClaimList] {
	return k.cs.CoreV1().PersistentVolumeClaims(ns)
}
func (k clientsetKube) Services(ns string) resourceAPI[*corev1.Service, *corev1.ServiceList] {
	return k.cs.CoreV1().Services(ns)
}
func (k clientsetKube) Events(ns string) resourceAPI[*corev1.Event, *corev1.EventList] {
	return k.cs.CoreV1().Events(ns)
}
func (k clientsetKube) Nodes() resourceAPI[*corev1.Node, *corev1.NodeList] {
	return k.cs.CoreV1().Nodes()
}
func (k clientsetKube) NetworkPolicies(ns string) resourceAPI[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList] {
	return k.cs.NetworkingV1().NetworkPolicies(ns)
}
func (k clientsetKube) CoreREST() rest.Interface { return k.cs.CoreV1().RESTClient() }
