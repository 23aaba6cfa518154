package eventbudget

import (
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
)

// Recorder is an events.EventRecorder that records through another only
// what its Budget allows, about references without a resourceVersion.
//
// client-go's recorder refers to the object as given, resourceVersion
// included, and its broadcaster merges repeats into a series only when
// their references are equal: an object that changes at every reconcile
// (its status is patched) would make a new Event object each time. Here
// every Event of one reason on one object is about the same reference, so
// repeats become one Event object whose series counts them.
type Recorder struct {
	next    events.EventRecorder
	scheme  *runtime.Scheme
	budget  *Budget
	metrics *Metrics
}

var _ events.EventRecorder = (*Recorder)(nil)

// NewRecorder records through next the Events that budget allows, naming
// objects by the kinds scheme knows, and counts the others in metrics
// (which may be nil).
func NewRecorder(next events.EventRecorder, scheme *runtime.Scheme, budget *Budget, metrics *Metrics) *Recorder {
	return &Recorder{next: next, scheme: scheme, budget: budget, metrics: metrics}
}

// Eventf records an Event about regarding, or drops it when it is over
// budget. It never waits.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	ref, err := r.reference(regarding)
	if err != nil {
		// client-go's recorder, with the same scheme, would refuse it too.
		klog.Background().Error(err, "Could not refer to the object of an Event; not recorded", "reason", reason)
		return
	}
	k := Key{Kind: ref.Kind, Name: ref.Name, UID: string(ref.UID), Type: eventtype, Reason: reason, Action: action}
	if v := r.budget.Allow(ref.Namespace, k); v.Dropped() {
		r.metrics.dropped(reason, v)
		return
	}
	var relatedRef runtime.Object
	if related != nil {
		// A related object's resourceVersion would split the series too.
		if rel, err := r.reference(related); err == nil {
			relatedRef = rel
		}
	}
	r.next.Eventf(ref, relatedRef, eventtype, reason, action, "%s", fitNote(fmt.Sprintf(note, args...)))
}

// NoteLimit is the most bytes the API server takes in an Event's note
// (events.k8s.io/v1): it refuses the whole Event past it.
const NoteLimit = 1024

// truncatedMark ends a note cut to NoteLimit: the condition's message on
// the object's status holds the whole text.
const truncatedMark = " … (cut: the object's status has it all)"

// fitNote cuts note to NoteLimit bytes, on a character boundary, marked as
// cut: a backend with many failing sources says more than an Event holds.
func fitNote(note string) string {
	if len(note) <= NoteLimit {
		return note
	}
	cut := NoteLimit - len(truncatedMark)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + truncatedMark
}

// reference refers to obj as client-go's recorder would, without its
// resourceVersion.
func (r *Recorder) reference(obj runtime.Object) (*corev1.ObjectReference, error) {
	ref, err := reference.GetReference(r.scheme, obj)
	if err != nil {
		return nil, err
	}
	ref = ref.DeepCopy()
	ref.ResourceVersion = ""
	return ref, nil
}

// Metrics count the Events the budget drops.
type Metrics struct {
	drops *prometheus.CounterVec
}

// NewMetrics registers the Event budget's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{drops: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "backendslice_events_dropped_total",
		Help: "Events not recorded because they were over budget, by reason and by the budget spent (namespace: the namespace's own; global: all namespaces' cap).",
	}, []string{"reason", "budget"})}
	if err := reg.Register(m.drops); err != nil {
		return nil, err
	}
	return m, nil
}

// dropped counts an Event of reason dropped by the budget v names. A nil
// Metrics counts nothing.
func (m *Metrics) dropped(reason string, v Verdict) {
	if m != nil {
		m.drops.WithLabelValues(reason, v.String()).Inc()
	}
}
