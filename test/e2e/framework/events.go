package framework

import (
	"context"
	"fmt"
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
