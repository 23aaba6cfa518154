package externalbackend

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// TestUnhandledFirst: of the cache's initial list, a backend whose spec was
// edited while no controller ran comes out of the queue before those whose
// status says they were handled, whatever the order of the list.
func TestUnhandledFirst(t *testing.T) {
	q := priorityqueue.New[ctrl.Request]("test")
	defer q.ShutDown()
	h := unhandledFirst()
	for i, name := range []string{"a", "b", "c", "d"} {
		xb := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 2}}
		xb.Status.ObservedGeneration = 2
		if name == "c" {
			xb.Status.ObservedGeneration = 1 // edited since it was last handled
		}
		// d is created after the initial list: a new backend.
		h.Create(context.Background(), event.CreateEvent{Object: xb, IsInInitialList: i < 3}, q)
	}
	var order []string
	for q.Len() > 0 {
		item, _, _ := q.GetWithPriority()
		order = append(order, item.Name)
		q.Done(item)
	}
	if len(order) != 4 || order[2] == "c" || order[3] == "c" || (order[0] != "c" && order[1] != "c") {
		t.Errorf("order %v: the edited backend c and the new d first, then the handled a and b", order)
	}
	if order[2] == "d" || order[3] == "d" {
		t.Errorf("order %v: a backend created after the initial list went behind it", order)
	}
}

// TestBackendLogger: a reconcile's log names the backend under the keys
// controller-runtime's builder uses, so that logs read as before the
// backend got a handler of its own.
func TestBackendLogger(t *testing.T) {
	var line string
	base := funcr.New(func(_, args string) { line = args }, funcr.Options{})
	backendLogger(base)(&ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "db"}}).Info("reconciled")
	for _, want := range []string{`"controller"="externalbackend"`, `"controllerKind"="ExternalBackend"`, `"ExternalBackend"={"name"="db" "namespace"="ns"}`, `"name"="db"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log %s: no %s", line, want)
		}
	}
}
