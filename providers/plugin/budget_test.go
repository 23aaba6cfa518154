package plugin

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/plugin/sdk"
)

// startInventory serves inv over real HTTP until t ends.
func startInventory(t *testing.T, inv *inventory) *providers.Connection {
	t.Helper()
	srv := httptest.NewServer(inv.plugin.Handler())
	t.Cleanup(srv.Close)
	return connection(srv.URL)
}

// of is req as source of backend in namespace ns.
func of(ns, backend string, req providers.Request) providers.Request {
	req.Namespace, req.Backend = ns, backend
	return req
}

// TestRefusedSourceHoldsNoWatch: a source the plugin refuses (forbidden)
// holds no watch and is not asked again before its delay, however often
// it is resolved; past the delay it is asked once more, and a change of
// what it asks asks at once.
func TestRefusedSourceHoldsNoWatch(t *testing.T) {
	inv := newInventory(true)
	inv.set("private", sdk.Endpoint{Address: "192.0.2.20", Serving: true})
	inv.set("open", sdk.Endpoint{Address: "192.0.2.21", Serving: true})
	inv.admits["private"] = "elsewhere"
	conn := startInventory(t, inv)
	p, err := New(Options{RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond, Wait: 2 * time.Second,
		RefusedDelay: 400 * time.Millisecond, MaxRefusedDelay: time.Hour}, newWakes())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	req := of("tenant", "refused", source("s", "private", conn))

	_, err = p.Resolve(context.Background(), req)
	pe := providers.AsError(err)
	if err == nil || !pe.Terminal || pe.Reason != v1alpha1.ReasonAccessDenied ||
		!strings.Contains(err.Error(), `group "private" is for namespace elsewhere only; it holds no watch and is asked again within 400ms`) {
		t.Fatalf("a refused source: %v, want a terminal AccessDenied saying it holds no watch", err)
	}
	if s := p.Stats(); s.Watches != 0 || s.Connections != 0 {
		t.Fatalf("after the refusal: %d watch(es), %d connection(s), want none", s.Watches, s.Connections)
	}
	asked := p.Stats().Requests
	for range 50 {
		if _, again := p.Resolve(context.Background(), req); again == nil || again.Error() != err.Error() {
			t.Fatalf("resolved again within the delay: %v, want the same refusal", again)
		}
	}
	if n := p.Stats().Requests - asked; n != 0 {
		t.Fatalf("50 resolves within the delay sent %d request(s), want none", n)
	}
	// Past the delay (at most 400 ms with its jitter): asked once more,
	// refused again, and the delay doubles.
	time.Sleep(450 * time.Millisecond)
	_, err = p.Resolve(context.Background(), req)
	if !providers.IsTerminal(err) || !strings.Contains(err.Error(), "it holds no watch and is asked again within 800ms") {
		t.Fatalf("past the delay: %v, want the refusal with the wait doubled", err)
	}
	// The client went with the last watch: a new one asks the plugin's
	// info first.
	if n := p.Stats().Requests - asked; n < 1 || n > 2 {
		t.Errorf("past the delay: %d request(s), want the resolve (and the info before it)", n)
	}
	// Another group is another request: asked at once.
	open := of("tenant", "refused", source("s", "open", conn))
	if _, err := p.Resolve(context.Background(), open); err != nil {
		t.Fatalf("the source changed to a group it may read: %v", err)
	}
	if s := p.Stats(); s.Watches != 1 {
		t.Errorf("an admitted source: %d watches, want 1", s.Watches)
	}
	p.mu.Lock()
	left := len(p.refused)
	p.mu.Unlock()
	if left != 0 {
		t.Errorf("%d refusal(s) kept after the source changed, want none", left)
	}
}

// TestNamespaceShareOfAPlugin: a namespace alone fills a plugin's
// watches; another namespace's new source gets a watch, taken back from
// the first's newest (its backend woken), and the first, past its share,
// is refused naming the budget and its share.
func TestNamespaceShareOfAPlugin(t *testing.T) {
	inv := newInventory(true)
	inv.set("web", sdk.Endpoint{Address: "192.0.2.30", Serving: true})
	conn := startInventory(t, inv)
	w := newWakes()
	p, err := New(Options{RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond, Wait: 2 * time.Second,
		MaxWatches: 4, NamespaceWatchFloor: 1}, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	var hog []providers.Request
	for i := range 4 {
		req := of("hog", fmt.Sprintf("b%d", i), source("s", "web", conn))
		if _, err := p.Resolve(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		hog = append(hog, req)
	}
	for len(w.ch) > 0 {
		<-w.ch
	}
	res, err := p.Resolve(context.Background(), of("quiet", "victim", source("s", "web", conn)))
	if err != nil || len(res.Endpoints) != 1 {
		t.Fatalf("another namespace's source with the plugin's watches full: %v, %v", res, err)
	}
	if s := p.Stats(); s.Watches != 4 {
		t.Errorf("%d watches, want the limit, 4", s.Watches)
	}
	woken := map[types.NamespacedName]bool{}
	deadline := time.After(10 * time.Second)
	for !woken[types.NamespacedName{Namespace: "hog", Name: "b3"}] {
		select {
		case b := <-w.ch:
			woken[b] = true
		case <-deadline:
			t.Fatalf("the stopped source's backend was not woken (woken: %v)", woken)
		}
	}
	_, err = p.Resolve(context.Background(), hog[3])
	want := "namespace hog holds 3 of the 4 sources the plugin of BackendProvider inventory"
	if err == nil || providers.IsTerminal(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "and its share is 2 while 2 namespaces hold sources there") {
		t.Fatalf("the stopped source again: %v, want a transient error saying %q and the share", err, want)
	}
	if _, err := p.Resolve(context.Background(), hog[0]); err != nil {
		t.Errorf("a running watch of the namespace over its share: %v", err)
	}
}
