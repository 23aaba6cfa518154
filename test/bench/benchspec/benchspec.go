// Package benchspec builds the ExternalBackends the benchmarks create, so
// that the scale, ceiling and memory benchmarks measure the same objects.
package benchspec

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Backend is an ExternalBackend of one ClusterIP port with every defaulted
// field set, so that externalbackend.Render, which runs without the API
// server's defaulting, sees what the controller sees. Vanished endpoints
// are removed at once.
func Backend(ns, name string, families []v1alpha1.AddressType) *v1alpha1.ExternalBackend {
	return &v1alpha1.ExternalBackend{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ExternalBackendSpec{
			Service: v1alpha1.ServiceSpec{
				Type:  v1alpha1.ServiceTypeClusterIP,
				Ports: []v1alpha1.ServicePort{{Name: "pg", Port: 5432, Protocol: "TCP"}},
			},
			AddressTypes: families,
			DrainPeriod:  &metav1.Duration{},
		},
	}
}

// Endpoint is a healthy static endpoint.
func Endpoint(addr string) v1alpha1.StaticEndpoint {
	return v1alpha1.StaticEndpoint{Address: addr, Health: v1alpha1.HealthHealthy}
}

// Small is backend j of a fleet, named prefix and j: dual-stack, 5 static
// endpoints (3 IPv4, 2 IPv6), addresses of its own up to 60,000 backends.
func Small(ns, prefix string, j int) *v1alpha1.ExternalBackend {
	xb := Backend(ns, fmt.Sprintf("%s%05d", prefix, j), []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6})
	var eps []v1alpha1.StaticEndpoint
	for m := range 3 {
		k := j*3 + m
		eps = append(eps, Endpoint(fmt.Sprintf("10.%d.%d.%d", 16+k/62500, k/250%250, k%250+1)))
	}
	for m := range 2 {
		eps = append(eps, Endpoint(fmt.Sprintf("2001:db8::%x:%x", j, m+1)))
	}
	xb.Spec.Sources = []v1alpha1.Source{{Name: "fixed", Static: &v1alpha1.StaticSource{Endpoints: eps}}}
	return xb
}
