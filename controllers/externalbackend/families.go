package externalbackend

import (
	"context"
	"fmt"
	"net/netip"

	ctrl "sigs.k8s.io/controller-runtime"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/internal/publish"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=list;watch

// clusterNetworks tells which IP families the cluster gives Services
// cluster IPs of, and the Service ranges themselves. A Service that asks
// for a family the cluster lacks is refused ("not configured on this
// cluster"), so the Service and the slices publish only these; and no
// endpoint may be in a Service range.
type clusterNetworks interface {
	read(ctx context.Context) (network, error)
}

// network is what the cluster's ServiceCIDRs, Nodes and API server say.
type network struct {
	served sets.Set[corev1.IPFamily]
	// cluster are every ServiceCIDR's ranges, a deleting one's too (its
	// cluster IPs may still be in use), and what clusterHosts adds: no
	// endpoint may be in them.
	cluster publish.ClusterNetworks
}

// serviceCIDRFamilies reads the families from the cluster's ServiceCIDRs
// (networking.k8s.io/v1, on every cluster since Kubernetes 1.33): a cluster
// serves a family when a ServiceCIDR of that family is not being deleted and
// not marked unready.
type serviceCIDRFamilies struct{ reader client.Reader }

func (f serviceCIDRFamilies) read(ctx context.Context) (network, error) {
	var list networkingv1.ServiceCIDRList
	if err := f.reader.List(ctx, &list); err != nil {
		return network{}, fmt.Errorf("listing ServiceCIDRs to learn the cluster's IP families: %w", err)
	}
	n := network{served: familiesOf(list.Items)}
	for _, c := range list.Items {
		for _, s := range c.Spec.CIDRs {
			if p, err := netip.ParsePrefix(s); err == nil {
				n.cluster.Ranges = append(n.cluster.Ranges, publish.ClusterRange{Prefix: p.Masked(), Of: "ServiceCIDR " + c.Name})
			}
		}
	}
	return n, nil
}

// familiesOf is the set of families the usable ServiceCIDRs cover.
func familiesOf(cidrs []networkingv1.ServiceCIDR) sets.Set[corev1.IPFamily] {
	out := sets.New[corev1.IPFamily]()
	for _, c := range cidrs {
		if !c.DeletionTimestamp.IsZero() || meta.IsStatusConditionPresentAndEqual(
			c.Status.Conditions, networkingv1.ServiceCIDRConditionReady, metav1.ConditionFalse) {
			continue
		}
		for _, s := range c.Spec.CIDRs {
			p, err := netip.ParsePrefix(s)
			switch {
			case err != nil:
				continue
			case p.Addr().Is4():
				out.Insert(corev1.IPv4Protocol)
			default:
				out.Insert(corev1.IPv6Protocol)
			}
		}
	}
	return out
}

// fixedFamilies are families given by the controller's configuration, for
// clusters without the ServiceCIDR API.
type fixedFamilies []corev1.IPFamily

// read knows no Service ranges: on such clusters --denied-cidrs lists them.
func (f fixedFamilies) read(context.Context) (network, error) {
	return network{served: sets.New(f...)}, nil
}

// familiesOfCluster picks how the controller learns which IP families the
// cluster serves: from its ServiceCIDRs, watched, where the API server has
// them (Kubernetes 1.33 and later); else both families are assumed, as
// before ServiceCIDRs existed. The bool says whether ServiceCIDRs are watched.
func familiesOfCluster(mgr ctrl.Manager, reader client.Reader) (clusterNetworks, bool, error) {
	gvk := networkingv1.SchemeGroupVersion.WithKind("ServiceCIDR")
	_, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return serviceCIDRFamilies{reader}, true, nil
	case meta.IsNoMatchError(err):
		ctrl.Log.Info("the API server has no ServiceCIDRs (Kubernetes before 1.33): assuming it serves both IP families")
		return fixedFamilies{corev1.IPv4Protocol, corev1.IPv6Protocol}, false, nil
	}
	return nil, false, fmt.Errorf("looking up the ServiceCIDR API: %w", err)
}
