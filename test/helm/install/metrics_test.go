package install

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// metricsReaderRule is what the metrics-reader ClusterRole grants: get on
// the metrics path, which the controller asks the API server about at each
// scrape.
var metricsReaderRule = rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}

// metricsReader is the name of the ClusterRole of objs that grants
// metricsReaderRule.
func metricsReader(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	var names []string
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		var r rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(r.Rules, func(p rbacv1.PolicyRule) bool {
			return slices.Equal(p.NonResourceURLs, metricsReaderRule.NonResourceURLs) && slices.Equal(p.Verbs, metricsReaderRule.Verbs)
		}) {
			names = append(names, r.Name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("ClusterRoles granting get on /metrics: %q, want one", names)
	}
	return names[0]
}

// scraperToken creates ServiceAccount name in ns, binds it to clusterRole
// (none when empty) and returns a token of it from the API server's
// TokenRequest, once the API server authorizes it as bound.
func scraperToken(t *testing.T, ns, name, clusterRole string) string {
	t.Helper()
	framework.Create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	user := identity{namespace: ns, name: name}.user()
	cs, err := kubernetes.NewForConfig(framework.E().Config())
	if err != nil {
		t.Fatal(err)
	}
	if clusterRole != "" {
		framework.Create(t, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		})
		framework.Eventually(t, framework.Timeout, user+" allowed get on /metrics", func() error {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
			}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !sar.Status.Allowed {
				return fmt.Errorf("not allowed: %s", sar.Status.Reason)
			}
			return nil
		})
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of %s: %v", user, err)
	}
	return tr.Status.Token
}

// scrape GETs /metrics from the controller at addr over HTTPS with token
// as its bearer (none when empty), as Prometheus does with the monitors'
// tlsConfig (the controller's certificate is its own, self-signed), and
// returns the status and the body.
func scrape(addr, token string) (int, string, error) {
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // what the chart's monitors do by default: the token, not the certificate, says who scrapes
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// checkMetricsAccess holds the metrics endpoint at addr to its default:
// HTTPS that serves a token whose ServiceAccount is bound to reader, and
// refuses a scrape without a token (401), with one the API server does
// not know (controller-runtime's filter answers 500 when the TokenReview
// says the token is invalid), and with a token of a ServiceAccount bound
// to nothing (403). The API server's TokenReview and SubjectAccessReview
// decide, asked by the controller under its own RBAC.
func checkMetricsAccess(t *testing.T, addr, reader string) {
	t.Helper()
	ns := framework.Namespace(t)
	allowed := scraperToken(t, ns, "prometheus", reader)
	stranger := scraperToken(t, ns, "stranger", "")
	framework.Eventually(t, framework.Timeout, "the metrics served to a token bound to "+reader, func() error {
		status, body, err := scrape(addr, allowed)
		switch {
		case err != nil:
			return err
		case status != http.StatusOK:
			return fmt.Errorf("%d: %s", status, body)
		case !strings.Contains(body, "backendslice_build_info"):
			return fmt.Errorf("no backendslice_build_info in %d bytes of metrics", len(body))
		}
		return nil
	})
	for _, c := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the API server does not know", "not-a-token", http.StatusInternalServerError},
		{"a token of a ServiceAccount bound to no role", stranger, http.StatusForbidden},
	} {
		status, body, err := scrape(addr, c.token)
		if err != nil || status != c.want {
			t.Errorf("a scrape with %s: %d (%v) %q, want %d", c.who, status, err, body, c.want)
		}
		if strings.Contains(body, "backendslice_") {
			t.Errorf("a scrape with %s was served metrics", c.who)
		}
	}
}
