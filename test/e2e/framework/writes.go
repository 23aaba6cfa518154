package framework

import (
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
)

// WriteCounter counts the controller's write requests (every method but
// GET) by namespace and resource, from its own client's requests: give
// its Wrap as Options.WrapTransport.
type WriteCounter struct {
	mu sync.Mutex
	n  map[string]int64 // "<namespace> <resource>[/<subresource>]"
}

// NewWriteCounter returns a counter of no writes yet.
func NewWriteCounter() *WriteCounter { return &WriteCounter{n: map[string]int64{}} }

// Wrap counts the writes that go through rt.
func (c *WriteCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet {
			if key := writeKey(r.URL.Path); key != "" {
				c.mu.Lock()
				c.n[key]++
				c.mu.Unlock()
			}
		}
		return rt.RoundTrip(r)
	})
}

// writeKey is "<namespace> <resource>[/<subresource>]" of a namespaced
// request path (.../namespaces/<ns>/<resource>[/<name>[/<subresource>]]),
// else "".
func writeKey(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] == "namespaces" {
			res := parts[i+2]
			if i+4 < len(parts) {
				res += "/" + parts[i+4]
			}
			return parts[i+1] + " " + res
		}
	}
	return ""
}

// Of is the count of writes to resource (endpointslices, services,
// externalbackends/status) in ns so far.
func (c *WriteCounter) Of(ns, resource string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[ns+" "+resource]
}

// All is the count of every write in ns so far.
func (c *WriteCounter) All(ns string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for k, v := range c.n {
		if strings.HasPrefix(k, ns+" ") {
			n += v
		}
	}
	return n
}

// roundTripper is a function that serves as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Percentile is the nearest-rank q-quantile of sorted delays, for the
// benchmarks' reports.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
