package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// writeWatch records every change of the Services and EndpointSlices of a
// namespace from the moment it starts, each as its kind, name and what
// changed, so that a write where none was expected says what it wrote.
type writeWatch struct {
	mu     sync.Mutex
	events []string
	// last is the last version of each object seen, by kind and name.
	last map[string]map[string]string
	stop func()
}

// watchWrites starts recording the writes of ns; stop ends it.
func watchWrites(t *testing.T, ns string) *writeWatch {
	t.Helper()
	c, ok := framework.E().Client.(client.WithWatch)
	if !ok {
		t.Fatalf("the framework's client (%T) cannot watch", framework.E().Client)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ww := &writeWatch{last: map[string]map[string]string{}}
	var done []chan struct{}
	for _, l := range []client.ObjectList{&corev1.ServiceList{}, &discoveryv1.EndpointSliceList{}} {
		// The watch starts at the list's version, so that a change is told
		// against the version before it.
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		switch l := l.(type) {
		case *corev1.ServiceList:
			for i := range l.Items {
				ww.last["Service "+l.Items[i].Name] = serviceFields(&l.Items[i])
			}
		case *discoveryv1.EndpointSliceList:
			for i := range l.Items {
				ww.last["EndpointSlice "+l.Items[i].Name] = sliceFields(&l.Items[i])
			}
		}
		w, err := c.Watch(ctx, l, client.InNamespace(ns), &client.ListOptions{Raw: rawFrom(l)})
		if err != nil {
			t.Fatal(err)
		}
		d := make(chan struct{})
		done = append(done, d)
		go func() {
			defer close(d)
			for ev := range w.ResultChan() {
				ww.record(ev)
			}
		}()
	}
	ww.stop = sync.OnceFunc(func() {
		cancel()
		for _, d := range done {
			<-d
		}
	})
	t.Cleanup(ww.stop)
	return ww
}

// rawFrom makes a watch start at list l's resource version.
func rawFrom(l client.ObjectList) *metav1.ListOptions {
	return &metav1.ListOptions{ResourceVersion: l.GetResourceVersion()}
}

// record notes one watch event.
func (ww *writeWatch) record(ev watch.Event) {
	var key string
	var fields map[string]string
	switch o := ev.Object.(type) {
	case *corev1.Service:
		key, fields = "Service "+o.Name, serviceFields(o)
	case *discoveryv1.EndpointSlice:
		key, fields = "EndpointSlice "+o.Name, sliceFields(o)
	default:
		return
	}
	ww.mu.Lock()
	defer ww.mu.Unlock()
	what := ""
	switch ev.Type {
	case watch.Added:
		what = "created"
	case watch.Deleted:
		what = "deleted"
	default:
		what = strings.Join(fieldDiff(ww.last[key], fields), "; ")
		if what == "" {
			what = "nothing changed that the controller writes"
		}
	}
	if ev.Type == watch.Deleted {
		delete(ww.last, key)
	} else {
		ww.last[key] = fields
	}
	ww.events = append(ww.events, fmt.Sprintf("%s %s %s: %s", time.Now().Format("15:04:05.000"), ev.Type, key, what))
}

// String ends the watch and lists the writes it saw, one a line.
func (ww *writeWatch) String() string {
	ww.stop()
	ww.mu.Lock()
	defer ww.mu.Unlock()
	if len(ww.events) == 0 {
		return "\n\t(no Service or EndpointSlice event)"
	}
	return "\n\t" + strings.Join(ww.events, "\n\t")
}

// fieldDiff says which fields differ between two versions of an object.
func fieldDiff(old, cur map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(cur)) {
		if v, ok := old[k]; !ok {
			out = append(out, fmt.Sprintf("%s: + %s", k, cur[k]))
		} else if v != cur[k] {
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, v, cur[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := cur[k]; !ok {
			out = append(out, fmt.Sprintf("%s: - %s", k, old[k]))
		}
	}
	return out
}

// metaFields are the fields of an object's metadata that a write can
// change: labels, annotations, owners, finalizers and deletion.
func metaFields(o client.Object) map[string]string {
	out := map[string]string{}
	for k, v := range o.GetLabels() {
		out["label "+k] = v
	}
	for k, v := range o.GetAnnotations() {
		out["annotation "+k] = v
	}
	for _, r := range o.GetOwnerReferences() {
		out["owner "+r.Kind+"/"+r.Name] = string(r.UID)
	}
	if f := o.GetFinalizers(); len(f) > 0 {
		out["finalizers"] = strings.Join(f, ",")
	}
	if o.GetDeletionTimestamp() != nil {
		out["deleting"] = "yes"
	}
	return out
}

// serviceFields are a Service's fields, by name.
func serviceFields(s *corev1.Service) map[string]string {
	out := metaFields(s)
	out["type"] = string(s.Spec.Type)
	out["clusterIP"] = s.Spec.ClusterIP
	out["ports"] = fmt.Sprint(s.Spec.Ports)
	out["selector"] = fmt.Sprint(s.Spec.Selector)
	out["ipFamilies"] = fmt.Sprint(s.Spec.IPFamilies)
	out["publishNotReadyAddresses"] = fmt.Sprint(s.Spec.PublishNotReadyAddresses)
	return out
}

// sliceFields are an EndpointSlice's fields, by name; each endpoint is one,
// named by its first address.
func sliceFields(s *discoveryv1.EndpointSlice) map[string]string {
	out := metaFields(s)
	out["addressType"] = string(s.AddressType)
	var ports []string
	for _, p := range s.Ports {
		ports = append(ports, fmt.Sprintf("%s=%v/%v", ptrString(p.Name), ptrVal(p.Port), ptrVal(p.Protocol)))
	}
	out["ports"] = strings.Join(ports, ",")
	for _, e := range s.Endpoints {
		c := e.Conditions
		out["endpoint "+strings.Join(e.Addresses, ",")] = fmt.Sprintf("ready=%v serving=%v terminating=%v hostname=%s zone=%s hints=%v",
			ptrVal(c.Ready), ptrVal(c.Serving), ptrVal(c.Terminating), ptrString(e.Hostname), ptrString(e.Zone), e.Hints)
	}
	return out
}

func ptrString(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

func ptrVal[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
