package eventbudget

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/backendslice/backendslice/test/metricstest"
)

// captured is an events.EventRecorder that keeps what it is given.
type captured struct{ regarding []runtime.Object }

func (c *captured) Eventf(regarding, _ runtime.Object, _, _, _, _ string, _ ...any) {
	c.regarding = append(c.regarding, regarding)
}

// TestRecorderRefersWithoutResourceVersion: what reaches the next recorder
// is a reference with the object's kind, name and UID but no
// resourceVersion, and what the budget refuses is counted by reason and
// budget, never reaching it.
func TestRecorderRefersWithoutResourceVersion(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	next := &captured{}
	limits := Limits{PerNamespace: Limit{Rate: 0, Burst: 1}, Global: Limit{Rate: 0, Burst: 10}, RepeatWindow: time.Minute}
	r := NewRecorder(next, clientgoscheme.Scheme, New(limits, nil), m)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "u1"}}
	for _, rv := range []string{"1", "2", "3"} {
		svc.ResourceVersion = rv
		r.Eventf(svc, nil, corev1.EventTypeWarning, "Broken", "Check", "broken at %s", rv)
	}
	// Another Event of the namespace is over its burst of one.
	r.Eventf(svc, nil, corev1.EventTypeWarning, "Other", "Check", "other")
	if len(next.regarding) != 3 {
		t.Fatalf("%d Events recorded, want the 3 repeats", len(next.regarding))
	}
	for _, o := range next.regarding {
		ref, ok := o.(*corev1.ObjectReference)
		if !ok {
			t.Fatalf("recorded about %T, want an ObjectReference", o)
		}
		if ref.ResourceVersion != "" || ref.Kind != "Service" || ref.Name != "db" || ref.UID != "u1" || ref.Namespace != "ns" {
			t.Fatalf("recorded about %+v, want Service ns/db u1 with no resourceVersion", ref)
		}
	}
	got, err := metricstest.Series(reg, "backendslice_events_dropped_total")
	if err != nil {
		t.Fatal(err)
	}
	if want := `backendslice_events_dropped_total{budget="namespace",reason="Other"}`; len(got) != 1 || got[want] != 1 {
		t.Fatalf("drops counted %v, want %s 1", got, want)
	}
}

// TestFitNote: a note within the API server's limit passes as it is; a
// longer one is cut to the limit on a character boundary and says so.
func TestFitNote(t *testing.T) {
	for _, tc := range []struct {
		name string
		note string
		cut  bool
	}{
		{"short", "source db: no answer", false},
		{"exactly the limit", strings.Repeat("a", NoteLimit), false},
		{"one byte over", strings.Repeat("a", NoteLimit+1), true},
		{"multibyte across the cut", strings.Repeat("é", NoteLimit), true},
		{"sixteen failing sources", strings.Repeat("spec.sources[x].plugin: the plugin refused this source; asked again within 2m0s. ", 16), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fitNote(tc.note)
			if len(got) > NoteLimit || !utf8.ValidString(got) {
				t.Fatalf("%d bytes (valid UTF-8 %t), want at most %d of valid UTF-8", len(got), utf8.ValidString(got), NoteLimit)
			}
			if cut := got != tc.note; cut != tc.cut || cut != strings.HasSuffix(got, truncatedMark) {
				t.Fatalf("cut %t (marked %t), want %t", cut, strings.HasSuffix(got, truncatedMark), tc.cut)
			}
			if tc.cut && !strings.HasPrefix(tc.note, strings.TrimSuffix(got, truncatedMark)) {
				t.Fatal("the cut note is not the start of the note")
			}
		})
	}
}
