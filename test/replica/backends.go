package replica

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// Backend is an ExternalBackend with two ports (app, 80 to 8080, and
// admin, 9000 to 9090), both address families and the given drain
// period.
func Backend(ns, name string, drain time.Duration, sources ...v1alpha1.Source) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{Ports: []v1alpha1.ServicePort{
				{Name: "app", Port: 80, TargetPort: ptr.To[int32](8080)},
				{Name: "admin", Port: 9000, TargetPort: ptr.To[int32](9090)},
			}},
			AddressTypes: []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6},
			DrainPeriod:  &metav1.Duration{Duration: drain},
			Sources:      sources,
		},
	}
}

// StaticSource is a static source of addrs.
func StaticSource(name string, addrs ...string) v1alpha1.Source {
	s := v1alpha1.Source{Name: name, Static: &v1alpha1.StaticSource{}}
	for _, a := range addrs {
		s.Static.Endpoints = append(s.Static.Endpoints, v1alpha1.StaticEndpoint{Address: a})
	}
	return s
}

// DNSSource is a dns source of host.
func DNSSource(name, host string) v1alpha1.Source {
	return v1alpha1.Source{Name: name, DNS: &v1alpha1.DNSSource{Name: host}}
}

// ConsulSource is a consul source of service.
func ConsulSource(name, service string) v1alpha1.Source {
	return v1alpha1.Source{Name: name, Consul: &v1alpha1.ConsulSource{Service: service}}
}

// EmptyNamespace deletes every ExternalBackend, Service, EndpointSlice
// and ConfigMap of ns, once its controllers are gone, so that the next
// test's controllers do not reconcile them. envtest runs no garbage
// collector (nor namespace controller), so owner references delete
// nothing and the namespace itself stays.
func EmptyNamespace(ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := framework.E().Client
	for _, obj := range []client.Object{&v1alpha1.ExternalBackend{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.ConfigMap{}} {
		if err := c.DeleteAllOf(ctx, obj, client.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %T: %w", obj, err)
		}
	}
	return nil
}
