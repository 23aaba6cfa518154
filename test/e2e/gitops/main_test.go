// Package gitops checks, on a real API server with the controller running,
// what Argo CD and kstatus-based tools see of ExternalBackends: their health
// and status from the objects the controller writes, children owned and
// free of Argo CD's tracking, and no diff after a sync.
package gitops

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/argocdtest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// The controller runs with the static provider only, as a binary built
// without the others would: a dns source is then a terminal error.
func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
	}))
}

// live reads the ExternalBackend as Argo CD and kstatus read it: as the API
// server's JSON, not through our Go types.
func live(t *testing.T, xb *v1alpha1.ExternalBackend) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ExternalBackend"))
	if err := framework.E().Client.Get(context.Background(), client.ObjectKeyFromObject(xb), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// judge checks what Argo CD's health check and kstatus make of the live
// ExternalBackend, and returns kstatus's message.
func judge(t *testing.T, xb *v1alpha1.ExternalBackend, health string, want status.Status) string {
	t.Helper()
	return judgeObject(t, live(t, xb), health, "", want)
}

// judgeObject checks what Argo CD's health check and kstatus make of u, an
// object as the API server sent it, and that the health message says
// message; it returns kstatus's message.
func judgeObject(t *testing.T, u *unstructured.Unstructured, health, message string, want status.Status) string {
	t.Helper()
	h, err := argocdtest.HealthOf(u)
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != health || !strings.Contains(h.Message, message) {
		t.Errorf("Argo CD health %s (%s), want %s saying %q", h.Status, h.Message, health, message)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != want {
		t.Errorf("kstatus %s (%s), want %s", res.Status, res.Message, want)
	}
	return res.Message
}
