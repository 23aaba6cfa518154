package dns_test

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/dns"
)

// TestConnect: a DNS BackendProvider with resolvers is a connection to
// them; one without only admits, and its sources ask the controller's.
func TestConnect(t *testing.T) {
	bp := func(resolvers ...string) *v1alpha1.BackendProvider {
		return &v1alpha1.BackendProvider{ObjectMeta: metav1.ObjectMeta{Name: "resolvers", UID: "uid", Generation: 1},
			Spec: v1alpha1.BackendProviderSpec{DNS: &v1alpha1.DNSProvider{Resolvers: resolvers}}}
	}
	kinds := dns.Kinds()
	conn, err := kinds.Connect(context.Background(), bp("192.0.2.53:53"), nil)
	s, ok := providers.SettingsOf[*dns.Settings](conn)
	if err != nil || conn.Name != "resolvers" || conn.Key == "" || !ok || !slices.Equal(s.Resolvers, []string{"192.0.2.53:53"}) {
		t.Errorf("Connect = %+v, %v", conn, err)
	}
	if conn, err := kinds.Connect(context.Background(), bp(), nil); conn != nil || err != nil {
		t.Errorf("Connect without resolvers = %+v, %v; want nil", conn, err)
	}
}
