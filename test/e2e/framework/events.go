package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// WaitEvent waits for an events.k8s.io/v1 Event about xb of type typ with
// reason, and returns it.
func WaitEvent(t *testing.T, xb *v1alpha1.ExternalBackend, typ, reason string) *eventsv1.Event {
	t.Helper()
	var ev *eventsv1.Event
	Eventually(t, Timeout, fmt.Sprintf("%s event %s about %s", typ, reason, xb.Name), func() error {
		var list eventsv1.EventList
		if err := current.Client.List(context.Background(), &list, client.InNamespace(xb.Namespace)); err != nil {
			return err
		}
		var seen []string
		for i, e := range list.Items {
			if e.Regarding.Kind != "ExternalBackend" || e.Regarding.Name != xb.Name {
				continue
			}
			if e.Type == typ && e.Reason == reason {
				ev = &list.Items[i]
				return nil
			}
			seen = append(seen, e.Type+"/"+e.Reason)
		}
		return fmt.Errorf("events about it: %v", seen)
	})
	return ev
}

// ExpectNotNamed fails the test if xb's status, or the note of any Event
// of its namespace, holds any of words: for what a tenant must not learn.
func ExpectNotNamed(t *testing.T, xb *v1alpha1.ExternalBackend, words ...string) {
	t.Helper()
	status, err := json.Marshal(xb.Status)
	if err != nil {
		t.Fatal(err)
	}
	told := map[string]string{"status": string(status)}
	var events eventsv1.EventList
	if err := current.Client.List(context.Background(), &events, client.InNamespace(xb.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		told["event "+e.Reason] += e.Note
	}
	for where, text := range told {
		for _, w := range words {
			if strings.Contains(text, w) {
				t.Errorf("%s names %q: %s", where, w, text)
			}
		}
	}
}
