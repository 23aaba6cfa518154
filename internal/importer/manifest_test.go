package importer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestManifest(t *testing.T) {
	objs := Objects{Services: []corev1.Service{service("", "db")}, Slices: []discoveryv1.EndpointSlice{slice("", "db-1", "db", "192.0.2.1")}}
	for _, tc := range []struct {
		name string
		opt  Options
		want string
	}{
		{
			name: "without a namespace, as in a folder Argo CD syncs",
			opt:  Options{Namespace: "payments", StaticProvider: "vms"},
			want: `# ExternalBackend payments/db, imported by ` + "`backendslice import`" + `.
# It replaces Service db, EndpointSlice db-1.
apiVersion: backendslice.io/v1alpha1
kind: ExternalBackend
metadata:
  name: db
spec:
  addressTypes:
  - IPv4
  service:
    ports:
    - name: http
      port: 80
      targetPort: 8080
  sources:
  - name: imported
    providerRef:
      name: vms
    static:
      endpoints:
      - address: 192.0.2.1
`,
		},
		{
			name: "adopted, with notes wrapped",
			opt:  Options{Adopt: true},
			want: `# ExternalBackend default/db, imported by ` + "`backendslice import`" + `.
# It replaces Service db, EndpointSlice db-1.
# note:
#   - Service db: spec.service.adopt: the controller takes this Service over, so its cluster IP and
#     DNS name stay
#   - Service db: its source names no BackendProvider (--static-provider): the controller publishes
#     it only if started with --allow-sources-without-provider
apiVersion: backendslice.io/v1alpha1
kind: ExternalBackend
metadata:
  name: db
spec:
  addressTypes:
  - IPv4
  service:
    adopt:
      handWrittenManagedBy:
      - cluster-admins
    ports:
    - name: http
      port: 80
      targetPort: 8080
  sources:
  - name: imported
    static:
      endpoints:
      - address: 192.0.2.1
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Convert(objs, tc.opt)
			if len(res.Backends) != 1 {
				t.Fatalf("no backend: %q", res.Refused)
			}
			got, err := res.Backends[0].Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("manifest:\n%s\nwant:\n%s", got, tc.want)
			}
			for _, l := range strings.Split(string(got), "\n") {
				if len(l) > commentWidth {
					t.Errorf("line longer than %d: %q", commentWidth, l)
				}
			}
		})
	}
}
