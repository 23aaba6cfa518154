package tenancy_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestTwoConsulClusters uses two Consul clusters (agents of datacenters
// east and west, ACLs on with a default policy of deny, a token each)
// through two BackendProviders of one install. The same service name lives
// in both: each backend publishes the instances of its own cluster only,
// and each agent is asked with its own provider's token only.
func TestTwoConsulClusters(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "two-clusters", nil)
	service := "db-" + ns
	register(t, east, consultest.Service{ID: service + "-1", Name: service, Address: "192.0.2.51"})
	register(t, east, consultest.Service{ID: service + "-2", Name: service, Address: "192.0.2.52"})
	register(t, west, consultest.Service{ID: service + "-1", Name: service, Address: "198.51.100.51"})
	eastToken, westToken := readToken(t, east), readToken(t, west)
	eastProxy, westProxy := consultest.NewProxy(t, east.Addr), consultest.NewProxy(t, west.Addr)
	eastSecret, westSecret := uniqueName(ns, "east"), uniqueName(ns, "west")
	putSecret(t, eastSecret, "token", eastToken.Secret)
	putSecret(t, westSecret, "token", westToken.Secret)
	eastBP, westBP := uniqueName(ns, "east"), uniqueName(ns, "west")
	createProvider(t, eastBP, admits("", ns), consulSpec(eastProxy.Addr, "east", eastSecret))
	createProvider(t, westBP, admits("", ns), consulSpec(westProxy.Addr, "west", westSecret))
	waitProviderStatus(t, eastBP, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)
	waitProviderStatus(t, westBP, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)

	fromEast := backend(ns, "from-east", nil, consulSource(eastBP, service))
	fromWest := backend(ns, "from-west", nil, consulSource(westBP, service))
	framework.Create(t, fromEast)
	framework.Create(t, fromWest)
	waitStates(t, ns, "from-east", statesOf(ready, "192.0.2.51", "192.0.2.52"))
	waitStates(t, ns, "from-west", statesOf(ready, "198.51.100.51"))
	framework.WaitReady(t, fromEast)
	framework.WaitReady(t, fromWest)
	wantSliceShape(t, ns, "from-east")
	wantSliceShape(t, ns, "from-west")

	// A change in one cluster reaches its backend only.
	register(t, west, consultest.Service{ID: service + "-2", Name: service, Address: "198.51.100.52"})
	waitStates(t, ns, "from-west", statesOf(ready, "198.51.100.51", "198.51.100.52"))
	waitStates(t, ns, "from-east", statesOf(ready, "192.0.2.51", "192.0.2.52"))

	for _, c := range []struct {
		name  string
		proxy *consultest.Proxy
		token string
	}{{"east", eastProxy, eastToken.Secret}, {"west", westProxy, westToken.Secret}} {
		reqs := c.proxy.Requests()
		if queriesOf(c.proxy, service) == 0 {
			t.Errorf("the %s agent was never asked for %s", c.name, service)
		}
		for _, r := range reqs {
			if r.Token != c.token {
				t.Errorf("the %s agent was asked %s with token %q, not its provider's", c.name, r.Path, r.Token)
			}
		}
	}
}

// TestConsulTokenRotation replaces the token in a Consul provider's Secret
// and revokes the old token in Consul: the backend keeps its endpoints
// throughout and follows Consul again with the new token, without a
// controller restart. Deleting the Secret turns the provider's Ready
// condition (and the Ready column kubectl prints) to False/SecretNotFound,
// the backend keeping what it published; the Secret back, the provider is
// Ready again and the backend follows Consul.
func TestConsulTokenRotation(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "rotation", nil)
	service := "rot-" + ns
	proxy := consultest.NewProxy(t, east.Addr)
	old, next := readToken(t, east), readToken(t, east)
	secret := uniqueName(ns, "token")
	putSecret(t, secret, "token", old.Secret)
	bp := uniqueName(ns, "consul")
	createProvider(t, bp, admits("", ns), consulSpec(proxy.Addr, "east", secret))
	waitProviderStatus(t, bp, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)
	waitPrinted(t, bp, map[string]string{"Kind": "consul", "Ready": "True", "Reason": v1alpha1.ReasonProviderReady})

	register(t, east, consultest.Service{ID: service + "-1", Name: service, Address: "192.0.2.61"})
	xb := backend(ns, "db", nil, consulSource(bp, service))
	framework.Create(t, xb)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.61"))
	framework.WaitReady(t, xb)

	// Rotate: the Secret gets the new token, then the old one is revoked.
	putSecret(t, secret, "token", next.Secret)
	if err := east.RevokeToken(old); err != nil {
		t.Fatal(err)
	}
	rotated := len(proxy.Requests())
	// A change ends the blocking query in flight; the queries after it
	// can only read the service with the new token.
	register(t, east, consultest.Service{ID: service + "-2", Name: service, Address: "192.0.2.62"})
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.61", "192.0.2.62"))
	framework.WaitReady(t, xb)
	reqs := proxy.Requests()
	if last := lastQuery(reqs, service); last.Token != next.Secret {
		t.Errorf("the last query of %s carried token %q, want the rotated one", service, last.Token)
	}
	t.Logf("queries after the rotation: %d, tokens %v", len(reqs)-rotated, tokensOf(reqs[rotated:], old.Secret, next.Secret))
	waitProviderStatus(t, bp, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)

	// The Secret deleted: the provider says so; the backend keeps its endpoints.
	deleteSecret(t, secret)
	waitProviderStatus(t, bp, "consul", metav1.ConditionFalse, v1alpha1.ReasonSecretNotFound, bp, controllerNamespace+"/"+secret)
	waitPrinted(t, bp, map[string]string{"Ready": "False", "Reason": v1alpha1.ReasonSecretNotFound})
	// A change in Consul ends the blocking query in flight (let in with the
	// token before: it may still answer with the change); the watch then
	// asks again without a token to ask with, and the source fails.
	register(t, east, consultest.Service{ID: service + "-3", Name: service, Address: "192.0.2.63"})
	failing := waitResolvedFalse(t, xb, secret)
	if failing.Reason != v1alpha1.ReasonProviderNotAvailable {
		// As a missing CA Secret does: the provider cannot be used.
		t.Errorf("with the token Secret missing, Resolved is %s/%s, want ProviderNotAvailable as for any unusable provider: %s",
			failing.Status, failing.Reason, failing.Message)
	}
	held, err := states(t, ns, "db")
	if err != nil {
		t.Fatal(err)
	}
	if held["192.0.2.61"] != ready || held["192.0.2.62"] != ready {
		t.Errorf("with the token Secret missing, the backend publishes %v: the endpoints it had are not held", held)
	}
	// Nothing is asked without a token: a further change is not seen.
	register(t, east, consultest.Service{ID: service + "-4", Name: service, Address: "192.0.2.64"})
	time.Sleep(1500 * time.Millisecond)
	if now, err := states(t, ns, "db"); err != nil || !maps.Equal(now, held) {
		t.Errorf("with the token Secret missing, the backend went from %v to %v (%v)", held, now, err)
	}

	// Back, with the new token: Ready again, and Consul followed.
	putSecret(t, secret, "token", next.Secret)
	waitProviderStatus(t, bp, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)
	waitPrinted(t, bp, map[string]string{"Ready": "True", "Reason": v1alpha1.ReasonProviderReady})
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.61", "192.0.2.62", "192.0.2.63", "192.0.2.64"))
	framework.WaitReady(t, xb)
}

// lastQuery is the last health query of service among reqs (the
// provider's connection checks ask other paths).
func lastQuery(reqs []consultest.Request, service string) consultest.Request {
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Path == "/v1/health/service/"+service {
			return reqs[i]
		}
	}
	return consultest.Request{}
}

// tokensOf names the tokens of reqs: old, new or other.
func tokensOf(reqs []consultest.Request, old, next string) map[string]int {
	out := map[string]int{}
	for _, r := range reqs {
		switch r.Token {
		case old:
			out["old"]++
		case next:
			out["new"]++
		default:
			out[fmt.Sprintf("other %q", r.Token)]++
		}
	}
	return out
}

// waitResolvedFalse waits until xb's Resolved condition is False with a
// message holding every part, and returns it.
func waitResolvedFalse(t *testing.T, xb *v1alpha1.ExternalBackend, parts ...string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	framework.Eventually(t, framework.Timeout, fmt.Sprintf("%s/%s Resolved=False naming %q", xb.Namespace, xb.Name, parts), func() error {
		c = meta.FindStatusCondition(framework.Get(t, xb).Status.Conditions, v1alpha1.ConditionResolved)
		switch {
		case c == nil:
			return fmt.Errorf("no Resolved condition")
		case c.Status != metav1.ConditionFalse || len(missing(c.Message, parts...)) > 0:
			return fmt.Errorf("Resolved is %s/%s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})
	return c
}

// TestUnusableProviderHolds: a provider that admits the namespace but
// cannot be used (its CA Secret missing from the controller's namespace)
// is a failure of the provider, not a refusal: the provider's status says
// SecretNotFound, the backend ProviderNotAvailable naming the Secret, with
// a Warning event, and what it published is held, neither withdrawn nor
// drained. The CA reference removed, the backend follows Consul again.
func TestUnusableProviderHolds(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "unusable", nil)
	service := "db-" + ns
	proxy := consultest.NewProxy(t, east.Addr)
	secret := uniqueName(ns, "token")
	putSecret(t, secret, "token", readToken(t, east).Secret)
	register(t, east, consultest.Service{ID: service + "-1", Name: service, Address: "192.0.2.111"})
	bp := uniqueName(ns, "consul")
	createProvider(t, bp, admits("", ns), consulSpec(proxy.Addr, "east", secret))
	xb := backend(ns, "db", drainHour, consulSource(bp, service))
	framework.Create(t, xb)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.111"))
	framework.WaitReady(t, xb)

	ca := uniqueName(ns, "ca")
	editProvider(t, bp, func(p *v1alpha1.BackendProvider) {
		p.Spec.Consul.TLS = &v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: ca, Key: "ca.crt"}}
	})
	waitProviderStatus(t, bp, "consul", metav1.ConditionFalse, v1alpha1.ReasonSecretNotFound, controllerNamespace+"/"+ca)
	parts := []string{controllerNamespace + "/" + ca, "kubectl get bp " + bp}
	waitConditions(t, xb, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAvailable, parts...)
	waitEvent(t, xb, corev1.EventTypeWarning, v1alpha1.ReasonProviderNotAvailable, parts...)
	asked := queriesOf(proxy, service)
	register(t, east, consultest.Service{ID: service + "-2", Name: service, Address: "192.0.2.112"})
	time.Sleep(time.Second)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.111"))
	wantNotDraining(t, xb, "192.0.2.111")
	if n := queriesOf(proxy, service) - asked; n != 0 {
		t.Errorf("the unusable provider's agent was asked %d time(s)", n)
	}

	editProvider(t, bp, func(p *v1alpha1.BackendProvider) { p.Spec.Consul.TLS = nil })
	waitProviderStatus(t, bp, "consul", metav1.ConditionTrue, v1alpha1.ReasonProviderReady)
	waitStates(t, ns, "db", statesOf(ready, "192.0.2.111", "192.0.2.112"))
	framework.WaitReady(t, xb)
}
