package migration_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/backendslice/backendslice/test/netlab"
)

// Bounds of the client: it connects every connGap, waits at most
// dialTimeout for each answer, and ends after maxConns connections or
// maxTime, whichever comes first, if the test has not stopped it by then.
const (
	connGap     = 5 * time.Millisecond
	dialTimeout = time.Second
	maxConns    = 40000
	maxTime     = 3 * time.Minute
)

// traffic is a client on the node connecting to one address, one
// connection at a time, as an application polling its database would.
type traffic struct {
	addr   string
	stop   chan struct{}
	done   chan trafficResult
	once   sync.Once
	result trafficResult
}

// trafficResult counts a client's connections.
type trafficResult struct {
	conns, failed int
	// byHost counts the successful ones by the host that answered.
	byHost map[string]int
	// failures describe the first few failed connections.
	failures []string
	// bounded: the client ended at maxConns or maxTime, not when stopped.
	bounded bool
}

// startTraffic starts a client connecting to addr from the node.
func startTraffic(addr string) *traffic {
	tr := &traffic{addr: addr, stop: make(chan struct{}), done: make(chan trafficResult, 1)}
	go tr.run()
	return tr
}

func (tr *traffic) run() {
	r := trafficResult{byHost: map[string]int{}}
	start := time.Now()
	for {
		select {
		case <-tr.stop:
			tr.done <- r
			return
		default:
		}
		if r.conns >= maxConns || time.Since(start) >= maxTime {
			r.bounded = true
			tr.done <- r
			return
		}
		at := time.Now()
		name, err := lab.Node.AskTCP(tr.addr, dialTimeout)
		r.conns++
		if err != nil {
			r.failed++
			if len(r.failures) < 5 {
				r.failures = append(r.failures, fmt.Sprintf("%s: %s", at.Format("15:04:05.000"), netlab.ErrorKind(err)))
			}
		} else {
			r.byHost[name]++
		}
		time.Sleep(connGap)
	}
}

// Stop ends the client and returns its counts; later calls return the
// same.
func (tr *traffic) Stop() trafficResult {
	tr.once.Do(func() {
		close(tr.stop)
		tr.result = <-tr.done
	})
	return tr.result
}
