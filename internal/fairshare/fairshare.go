// Package fairshare divides the controller's shared budgets between
// namespaces, as the API server's Priority and Fairness divides its seats
// between flows: here the flows are namespaces. Queue is the work queue
// (workers), RateLimiter the client's request budget, Buckets the token
// buckets of retries, Service recreations and status catch-ups. Each is
// work-conserving: a namespace alone may use the whole budget, so that a
// fleet that lives in one namespace is not slowed down.
package fairshare

import "time"

// Window is how long a flow counts as asking for requests after it last
// asked: longer than the gap between a reconcile's requests, so that a
// namespace kept waiting keeps counting.
const Window = 2 * time.Second

// ShareOf is the share of the workers that leaves one of workers free for
// the other namespaces: workers-1, and 1 for a single worker (which then
// cannot leave any free).
func ShareOf(workers int) int { return max(workers-1, 1) }
