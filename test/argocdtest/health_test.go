package argocdtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// fixture is a status the controller writes, and what Argo CD and kstatus
// make of it. Each branch of each health check has one; test/e2e/gitops
// holds both to the objects the controller really writes on a real API
// server, and the fixtures are copied from those.
type fixture struct {
	// file in testdata/.
	file string
	// health is what the health check returns, and message a part of its message.
	health, message string
	// kstatus is what kstatus computes.
	kstatus status.Status
}

// fixtures cover every file in testdata/; TestFixturesAreAllListed holds them to it.
var fixtures = []fixture{
	{"healthy.yaml", "Healthy", "1 of 1 endpoint(s) ready in 1 EndpointSlice(s)", status.CurrentStatus},
	{"healthy-addresses-dropped.yaml", "Healthy", "1 of 1 endpoint(s) ready", status.CurrentStatus},
	// The CRD defaults status.observedGeneration to 0, so kstatus sees the
	// generation is not observed yet.
	{"progressing-new.yaml", "Progressing", "Waiting for the controller to report", status.InProgressStatus},
	{"progressing-generation-not-observed.yaml", "Progressing", "observe generation 3", status.InProgressStatus},
	{"progressing-service-recreated.yaml", "Progressing", "observe generation 2", status.InProgressStatus},
	// Reconciling=True is kstatus's own condition for progress.
	{"progressing-adopting.yaml", "Progressing", "Adopting: handing the Service over: keeping EndpointSlice db-manual", status.InProgressStatus},
	{"progressing-ready-unknown.yaml", "Progressing", "Suspended: spec.suspend is true", status.InProgressStatus},
	{"degraded-service-conflict.yaml", "Degraded", "ServiceConflict: Service payments/orders exists", status.FailedStatus},
	{"degraded-provider-not-available.yaml", "Degraded", "ProviderNotAvailable: source vendor", status.FailedStatus},
	{"degraded-invalid-spec.yaml", "Degraded", "InvalidSpec: spec.service.name", status.FailedStatus},
	{"degraded-backend-not-found.yaml", "Degraded", "BackendNotFound: source vendor", status.FailedStatus},
	// Transient failures are retried: kstatus calls that InProgress, Argo CD
	// shows them as Degraded so that someone looks.
	{"degraded-source-failed.yaml", "Degraded", "SourceFailed: source consul", status.InProgressStatus},
	{"degraded-write-failed.yaml", "Degraded", "WriteFailed: EndpointSlice cart-ipv4-0", status.InProgressStatus},
	// kstatus knows no suspension: it reads the Ready condition the
	// suspended pass leaves (its status as it was, Unknown before any), and
	// that pass removes Stalled.
	{"suspended.yaml", "Suspended", "spec.suspend is true", status.CurrentStatus},
	{"suspended-never-ready.yaml", "Suspended", "spec.suspend is true", status.InProgressStatus},
	{"suspended-after-stalled.yaml", "Suspended", "spec.suspend is true", status.InProgressStatus},

	// BackendProviders: Ready, and Stalled beside it while Ready is False,
	// so that kstatus reads a provider that cannot be used as Failed.
	{"provider-healthy.yaml", "Healthy", "can be used", status.CurrentStatus},
	{"provider-progressing-new.yaml", "Progressing", "Waiting for the controller to check this BackendProvider", status.InProgressStatus},
	{"provider-progressing-generation-not-observed.yaml", "Progressing", "check generation 2", status.InProgressStatus},
	{"provider-progressing-ready-unknown.yaml", "Progressing", "Checking: not checked yet", status.InProgressStatus},
	{"provider-degraded-secret-not-found.yaml", "Degraded", "SecretNotFound: BackendProvider consul-eu: Secret backendslice-system/consul-eu-token", status.FailedStatus},
	{"provider-degraded-invalid.yaml", "Degraded", "InvalidProvider: spec.namespaces.selector", status.FailedStatus},
	{"provider-degraded-connection-failed.yaml", "Degraded", "ConnectionFailed: the connection check fails", status.FailedStatus},
}

// load reads a fixture as the unstructured object Argo CD and kstatus get
// from the API server, after checking that it is a valid ExternalBackend or
// BackendProvider, so that a typo in a fixture cannot pass unnoticed.
func load(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	var typed any
	switch u.GetKind() {
	case "ExternalBackend":
		typed = &v1alpha1.ExternalBackend{}
	case "BackendProvider":
		typed = &v1alpha1.BackendProvider{}
	default:
		t.Fatalf("%s is a %s: no health check for it", file, u.GetKind())
	}
	if err := yaml.UnmarshalStrict(data, typed); err != nil {
		t.Fatalf("%s is not a valid %s: %v", file, u.GetKind(), err)
	}
	return u
}

func TestHealthFixtures(t *testing.T) {
	for _, f := range fixtures {
		t.Run(strings.TrimSuffix(f.file, ".yaml"), func(t *testing.T) {
			got, err := HealthOf(load(t, f.file))
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != f.health || !strings.Contains(got.Message, f.message) {
				t.Errorf("health = %s %q, want %s with a message containing %q", got.Status, got.Message, f.health, f.message)
			}
		})
	}
}

func TestKStatusFixtures(t *testing.T) {
	for _, f := range fixtures {
		t.Run(strings.TrimSuffix(f.file, ".yaml"), func(t *testing.T) {
			res, err := status.Compute(load(t, f.file))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != f.kstatus {
				t.Errorf("kstatus = %s (%s), want %s", res.Status, res.Message, f.kstatus)
			}
		})
	}
}

func TestHealthFixturesAreAllListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, f := range fixtures {
		listed[f.file] = true
	}
	for _, file := range files {
		if !listed[filepath.Base(file)] {
			t.Errorf("%s is not in fixtures: say what Argo CD and kstatus make of it", file)
		}
	}
}
