package dns_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/dnstest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestSilentNamesHoldNoWorker has one namespace's backends look up names
// the DNS server never answers, enough of them to hold every worker if a
// worker waited for its lookups, and checks that another namespace's new
// backend is Ready while those lookups are still unanswered: no backend of
// the first namespace carries its lookups' failure yet. With workers that
// wait, the new backend's pass can start only once a worker has given up
// on a silent name and written that failure on status. Then the names
// answer, and every backend of the first namespace becomes Ready without
// being edited: the answers woke them. Not parallel: the workers are the
// subject.
func TestSilentNamesHoldNoWorker(t *testing.T) {
	const silent = 8 // twice the workers
	busy := framework.Namespace(t)
	var names []string
	var backends []*v1alpha1.ExternalBackend
	for i := range silent {
		name := host(fmt.Sprintf("silent-%d", i))
		setAddrs(name, 1, fmt.Sprintf("192.0.2.%d", 60+i))
		server.Fail(name, dnstest.Silent)
		names = append(names, name)
		xb := backend(busy, lookup(name))
		xb.Name = fmt.Sprintf("silent-%d", i)
		xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}
		framework.Create(t, xb)
		backends = append(backends, xb)
	}
	defer func() {
		for _, name := range names {
			server.Fail(name, dnstest.Answer)
		}
	}()
	// Every worker has taken a backend of busy once four names are asked.
	framework.Eventually(t, framework.Timeout, "lookups of four silent names", func() error {
		asked := 0
		for _, name := range names {
			if len(server.Queries(name)) > 0 {
				asked++
			}
		}
		if asked < 4 {
			return fmt.Errorf("%d names asked", asked)
		}
		return nil
	})

	quiet := framework.Namespace(t)
	xb := backend(quiet, v1alpha1.Source{Name: "fixed", Static: &v1alpha1.StaticSource{
		Endpoints: []v1alpha1.StaticEndpoint{{Address: "192.0.2.70"}}}})
	framework.Create(t, xb)
	framework.WaitReady(t, xb)
	for _, b := range backends {
		if c := meta.FindStatusCondition(framework.Get(t, b).Status.Conditions, v1alpha1.ConditionResolved); c != nil &&
			c.Status == metav1.ConditionFalse && !strings.Contains(c.Message, "no answer yet") {
			t.Errorf("backend %s already says its lookup failed (%q) when another namespace's backend became Ready: a worker waited for it", b.Name, c.Message)
		}
	}

	for _, name := range names {
		server.Fail(name, dnstest.Answer)
	}
	for _, b := range backends {
		framework.WaitReady(t, b)
	}
}
