package datapath_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/test/e2e/framework"
)

// sliceHistory records every change of the EndpointSlices in a namespace,
// so that a failed connection can be told against what kube-proxy was
// shown at that moment.
type sliceHistory struct {
	mu     sync.Mutex
	events []string
}

// watchSlices records the slice events of ns until the test ends.
func watchSlices(t *testing.T, ns string) *sliceHistory {
	t.Helper()
	c, err := client.NewWithWatch(framework.E().Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	h := &sliceHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			states, _ := framework.States([]discoveryv1.EndpointSlice{*s})
			h.mu.Lock()
			h.events = append(h.events, fmt.Sprintf("%s %s %s rv=%s %v",
				time.Now().Format("15:04:05.000"), ev.Type, s.Name, s.ResourceVersion, states))
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
	return h
}

// String is the recorded events, one per line.
func (h *sliceHistory) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.events[max(0, len(h.events)-20):], "\n")
}
