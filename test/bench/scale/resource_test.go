//go:build bench

package scale

import "testing"

func TestResource(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/a/services":                                         "services",
		"/api/v1/namespaces/a/services/x":                                       "services",
		"/api/v1/namespaces":                                                    "namespaces",
		"/apis/discovery.k8s.io/v1/namespaces/a/endpointslices":                 "endpointslices",
		"/apis/discovery.k8s.io/v1/endpointslices":                              "endpointslices",
		"/apis/backendslice.io/v1alpha1/namespaces/a/externalbackends/b/status": "externalbackends/status",
		"/apis/events.k8s.io/v1/namespaces/a/events":                            "events",
	} {
		if got := resource(path); got != want {
			t.Errorf("resource(%q) = %q, want %q", path, got, want)
		}
	}
}
