// Package metadatawatch_test runs the controller, wired as the binary wires
// it, on a real kube-apiserver, and watches its own HTTP requests: its
// EndpointSlices are watched as metadata only, what the metadata does not
// show is read past the cache only when the controller does not know it
// (after a start, or after someone else changed a slice), and hand edits are
// still repaired.
//
// The tests run one after another: they restart the controller and count
// its requests.
package metadatawatch_test

import (
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// seen counts the controller's requests of EndpointSlices.
var seen = &sliceRequests{}

func TestMain(m *testing.M) {
	os.Exit(framework.Run(m, framework.Options{
		Providers: func(providers.Waker) ([]providers.Provider, error) {
			return []providers.Provider{static.New()}, nil
		},
		WrapTransport: seen.wrap,
	}))
}

// sliceRequests counts the controller's requests of EndpointSlices outside
// the default namespace (where it reads the API server's own, a cache of
// its own that is not ours to count).
type sliceRequests struct {
	mu sync.Mutex
	// fullWatches are watches asking for whole slices; metaWatches for
	// metadata only.
	fullWatches, metaWatches int
	// fullLists are lists of whole slices: cluster-wide (allFullLists)
	// or of one namespace.
	allFullLists, fullLists int
	// watchBytes are the bytes received on slice watches; written the
	// bytes of the slices the controller sent in creates and updates.
	watchBytes, written int64
	// listed are the URLs of the lists of one namespace's whole slices.
	listed []string
}

// counts is a copy of the counters.
type counts struct {
	fullWatches, metaWatches, allFullLists, fullLists int
	watchBytes, written                               int64
}

func (c *sliceRequests) now() counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return counts{c.fullWatches, c.metaWatches, c.allFullLists, c.fullLists, c.watchBytes, c.written}
}

// wrap counts the requests that go through rt.
func (c *sliceRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		ns, ok := sliceRequest(r.URL.Path)
		if !ok || ns == "default" {
			return rt.RoundTrip(r)
		}
		meta := strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata")
		watch := r.URL.Query().Get("watch") == "true"
		c.mu.Lock()
		switch {
		case r.Method == http.MethodPost || r.Method == http.MethodPut:
			c.written += r.ContentLength
		case r.Method != http.MethodGet || strings.Count(strings.TrimPrefix(r.URL.Path, "/apis/discovery.k8s.io/v1/"), "/") >= 3:
			// A delete, or a GET of one slice.
		case watch && meta:
			c.metaWatches++
		case watch:
			c.fullWatches++
		case meta:
		case ns == "":
			c.allFullLists++
		default:
			c.fullLists++
			c.listed = append(c.listed, r.URL.String())
		}
		c.mu.Unlock()
		resp, err := rt.RoundTrip(r)
		if err == nil && watch {
			resp.Body = &countingBody{ReadCloser: resp.Body, c: c}
		}
		return resp, err
	})
}

// sliceRequest tells whether path is of EndpointSlices, and of which
// namespace ("" for all).
func sliceRequest(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/apis/discovery.k8s.io/v1/")
	if !ok {
		return "", false
	}
	if rest == "endpointslices" {
		return "", true
	}
	parts := strings.Split(rest, "/")
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] == "endpointslices" {
		return parts[1], true
	}
	return "", false
}

// countingBody counts the bytes read from a watch.
type countingBody struct {
	io.ReadCloser
	c *sliceRequests
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.mu.Lock()
	b.c.watchBytes += int64(n)
	b.c.mu.Unlock()
	return n, err
}

// roundTripper is a function that serves as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
