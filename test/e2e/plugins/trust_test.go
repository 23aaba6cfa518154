package plugins_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/tlstest"
)

// pluginServerName is the name in the test plugin's certificate.
const pluginServerName = "hosts.plugins.svc"

// TestTLSAndToken: the hostsfile plugin over HTTPS, its CA and the token
// in Secrets of the controller's namespace, publishes; a token the plugin
// does not know is AccessDenied on the source, and the endpoints stay; the
// Secret rotated, the next request publishes the change. A CA Secret that
// is missing makes the provider SecretNotFound.
func TestTLSAndToken(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	dir := t.TempDir()
	certs, err := tlstest.WriteCertificates(dir, pluginServerName)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "", examples[0].inventory(ns, "serving", "serving", "serving"))
	p := startHosts(t, file, "", "-tls-cert", certs.Cert, "-tls-key", certs.Key, "-token-file", tokenFile)
	secret(t, "ca-"+ns, map[string][]byte{"ca.crt": ca})
	tok := secret(t, "token-"+ns, map[string][]byte{"token": []byte("s3cret")})
	provider := "plugin-" + ns
	createProvider(t, provider, p.URL, []string{ns}, func(bp *v1alpha1.BackendProvider) {
		bp.Spec.Plugin.TLS = &v1alpha1.ProviderTLS{ServerName: pluginServerName,
			CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca-" + ns, Key: "ca.crt"}}
		bp.Spec.Plugin.TokenSecretRef = &v1alpha1.SecretKeyReference{Name: "token-" + ns, Key: "token"}
	})
	xb := backend(ns, "web", provider, map[string]string{"group": "web"})
	framework.Create(t, xb)
	framework.WaitReady(t, xb)
	framework.WaitAddresses(t, ns, xb.Name, framework.Served(webAddrs...)...)
	waitProvider(t, provider, metav1.ConditionTrue, v1alpha1.ReasonProviderReady)

	// A wrong token, and the plugin restarted so that the long-poll held
	// with the right one ends: the next request is refused, and the
	// plugin's change is not published while it is: what was stays.
	framework.Edit(t, tok, func(s *corev1.Secret) { s.Data["token"] = []byte("wrong") })
	p.Kill()
	writeFile(t, file, examples[0].inventory(ns, "down", "down", "serving"))
	tlsArgs := []string{"-tls-cert", certs.Cert, "-tls-key", certs.Key, "-token-file", tokenFile}
	startHosts(t, file, p.Addr, tlsArgs...)
	framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied)
	if e := sourceError(t, xb); !strings.Contains(e, "refused the controller's token") {
		t.Errorf("source error %q", e)
	}
	framework.WaitStates(t, ns, xb.Name, framework.ServedOf(map[string]string{
		"192.0.2.10": "true/true/false", "192.0.2.11": "true/true/false", "2001:db8::10": "true/true/false"}))

	framework.Edit(t, tok, func(s *corev1.Secret) { s.Data["token"] = []byte("s3cret") })
	framework.WaitReady(t, xb)
	framework.WaitStates(t, ns, xb.Name, framework.ServedOf(map[string]string{
		"192.0.2.10": "false/false/false", "192.0.2.11": "false/false/false", "2001:db8::10": "true/true/false"}))

	missing := "plugin-missing-ca-" + ns
	createProvider(t, missing, p.URL, []string{ns}, func(bp *v1alpha1.BackendProvider) {
		bp.Spec.Plugin.TLS = &v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "nothing-" + ns, Key: "ca.crt"}}
	})
	waitProvider(t, missing, metav1.ConditionFalse, v1alpha1.ReasonSecretNotFound)
}

// TestInvalidParameters: a plugin refusing the parameters is InvalidSpec,
// with the plugin's message, bounded and on one printable line, on status
// and as a Warning event; nothing is published from them.
func TestInvalidParameters(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	f := newFake(t)
	f.set("web", serving("192.0.2.60"))
	provider := "plugin-" + ns
	createProvider(t, provider, f.srv.URL, []string{ns}, nil)
	hostile := strings.Repeat("x", 600) + "\n\x1b[31m"
	xb := backend(ns, "web", provider, map[string]string{"group": "web", "colour\x1b": "blue"})
	xb.Spec.Sources[0].Plugin.Parameters = map[string]string{"group": "web", "colour": hostile}
	f.become(func(w http.ResponseWriter, r *http.Request) {
		answer(422, `{"error":{"code":"InvalidParameters","message":"colour: `+strings.Repeat("x", 600)+`\n\u001b[31m is not a colour"}}`)(w, r)
	})
	framework.Create(t, xb)
	cur := framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec)
	msg := conditionMessage(cur, v1alpha1.ConditionResolved)
	if !strings.Contains(msg, "spec.sources[inventory].plugin") || !strings.Contains(msg, "refused the parameters: colour: xxx") ||
		strings.ContainsAny(msg, "\n\x1b") || strings.Contains(msg, strings.Repeat("x", 513)) {
		t.Errorf("Resolved says %q", msg)
	}
	ev := framework.WaitEvent(t, xb, "Warning", v1alpha1.ReasonInvalidSpec)
	if !strings.Contains(ev.Note, "refused the parameters") || strings.ContainsAny(ev.Note, "\n\x1b") {
		t.Errorf("event says %q", ev.Note)
	}
	framework.WaitAddresses(t, ns, xb.Name)
}

// TestUnsupportedProtocol: a plugin that speaks another version of the
// protocol is refused with a clear BackendProvider condition, at once,
// and its sources say so without asking it to resolve.
func TestUnsupportedProtocol(t *testing.T) {
	t.Parallel()
	ns := framework.Namespace(t)
	f := newFake(t)
	f.set("web", serving("192.0.2.61"))
	f.become(answer(200, `{"protocolVersions":["v2"],"name":"future"}`))
	provider := "plugin-" + ns
	createProvider(t, provider, f.srv.URL, []string{ns}, nil)
	c := waitProvider(t, provider, metav1.ConditionFalse, v1alpha1.ReasonUnsupportedProtocol)
	if !strings.Contains(c.Message, `speaks plugin protocol versions ["v2"], and this controller speaks v1`) {
		t.Errorf("Ready says %q", c.Message)
	}
	xb := backend(ns, "web", provider, map[string]string{"group": "web"})
	framework.Create(t, xb)
	framework.WaitCondition(t, xb, v1alpha1.ConditionResolved, metav1.ConditionFalse, v1alpha1.ReasonProviderNotAvailable)
	if n := f.requests(ns); n != 0 {
		t.Errorf("a plugin of another version was asked to resolve %d time(s)", n)
	}
}
