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
// make of it.
type fixture struct {
	// file in testdata/.
	file string
	// health is what health.lua returns, and message a part of its message.
	health, message string
	// kstatus is what kstatus computes.
	kstatus status.Status
}

// fixtures cover every file in testdata/; TestFixturesAreAllListed holds them to it.
var fixtures = []fixture{
	{"healthy.yaml", "Healthy", "1 of 1 endpoint(s) ready in 1 EndpointSlice(s)", status.CurrentStatus},
	{"healthy-addresses-dropped.yaml", "Healthy", "1 of 1 endpoint(s) ready", status.CurrentStatus},
	// kstatus has no way to tell an object the controller has not looked at
	// yet: without status.observedGeneration and conditions it is Current.
	{"progressing-new.yaml", "Progressing", "Waiting for the controller to report", status.InProgressStatus},
	{"progressing-generation-not-observed.yaml", "Progressing", "observe generation 3", status.InProgressStatus},
	{"progressing-service-recreated.yaml", "Progressing", "Progressing: the Service was just created or recreated", status.InProgressStatus},
	{"degraded-service-conflict.yaml", "Degraded", "ServiceConflict: Service payments/orders exists", status.FailedStatus},
	{"degraded-provider-not-available.yaml", "Degraded", "ProviderNotAvailable: source vendor", status.FailedStatus},
	{"degraded-invalid-spec.yaml", "Degraded", "InvalidSpec: spec.service.name", status.FailedStatus},
	{"degraded-backend-not-found.yaml", "Degraded", "BackendNotFound: source vendor", status.FailedStatus},
	// Transient failures are retried: kstatus calls that InProgress, Argo CD
	// shows them as Degraded so that someone looks.
	{"degraded-source-failed.yaml", "Degraded", "SourceFailed: source consul", status.InProgressStatus},
	{"degraded-write-failed.yaml", "Degraded", "WriteFailed: EndpointSlice cart-ipv4-0", status.InProgressStatus},
	// kstatus knows no suspension: it reads the Ready and Stalled conditions
	// the suspended pass left as they were.
	{"suspended.yaml", "Suspended", "spec.suspend is true", status.CurrentStatus},
	{"suspended-never-ready.yaml", "Suspended", "spec.suspend is true", status.InProgressStatus},
	{"suspended-after-stalled.yaml", "Suspended", "spec.suspend is true", status.InProgressStatus},
}

// load reads a fixture as the unstructured object Argo CD and kstatus get
// from the API server, after checking that it is a valid ExternalBackend,
// so that a typo in a fixture cannot pass unnoticed.
func load(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &v1alpha1.ExternalBackend{}); err != nil {
		t.Fatalf("%s is not an ExternalBackend: %v", file, err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
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
