package netlab

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ClientLimits bound a client: it connects every Gap, waits at most
// DialTimeout for each answer, and ends after MaxConns connections or
// MaxTime, whichever comes first, if the test has not stopped it by then.
type ClientLimits struct {
	Gap, DialTimeout time.Duration
	MaxConns         int
	MaxTime          time.Duration
}

// DefaultClientLimits are a client connecting every 5 ms, waiting 1 s
// for each answer, for at most 40,000 connections or 3 minutes.
func DefaultClientLimits() ClientLimits {
	return ClientLimits{Gap: 5 * time.Millisecond, DialTimeout: time.Second, MaxConns: 40000, MaxTime: 3 * time.Minute}
}

// Client connects from a namespace of the lab to one TCP address, one
// connection at a time, as an application polling its database would,
// and counts what answered (AskTCP: the hosts' servers say their name).
type Client struct {
	ns     *Namespace
	addr   string
	limits ClientLimits
	stop   chan struct{}
	done   chan ClientResult
	once   sync.Once
	result ClientResult
}

// ClientResult counts a client's connections.
type ClientResult struct {
	Conns, Failed int
	// ByHost counts the successful ones by the host that answered.
	ByHost map[string]int
	// Failures describe the first few failed connections: when, and how
	// (ErrorKind).
	Failures []string
	// Bounded: the client ended at its limits, not when stopped.
	Bounded bool
	// Limits are the client's.
	Limits ClientLimits
}

// StartClient starts a client in n connecting to addr (host:port).
func (n *Namespace) StartClient(addr string, limits ClientLimits) *Client {
	c := &Client{ns: n, addr: addr, limits: limits, stop: make(chan struct{}), done: make(chan ClientResult, 1)}
	go c.run()
	return c
}

func (c *Client) run() {
	r := ClientResult{ByHost: map[string]int{}, Limits: c.limits}
	start := time.Now()
	for {
		select {
		case <-c.stop:
			c.done <- r
			return
		default:
		}
		if r.Conns >= c.limits.MaxConns || time.Since(start) >= c.limits.MaxTime {
			r.Bounded = true
			c.done <- r
			return
		}
		at := time.Now()
		name, err := c.ns.AskTCP(c.addr, c.limits.DialTimeout)
		r.Conns++
		if err != nil {
			r.Failed++
			if len(r.Failures) < 5 {
				r.Failures = append(r.Failures, fmt.Sprintf("%s: %s", at.Format("15:04:05.000"), ErrorKind(err)))
			}
		} else {
			r.ByHost[name]++
		}
		time.Sleep(c.limits.Gap)
	}
}

// Stop ends the client and returns its counts; later calls return the
// same.
func (c *Client) Stop() ClientResult {
	c.once.Do(func() {
		close(c.stop)
		c.result = <-c.done
	})
	return c.result
}

// Err says what a client's run must not show: a failed connection, limits
// reached before the test stopped it (the run was not covered to its
// end), or no connection at all.
func (r ClientResult) Err() error {
	var errs []error
	if r.Failed > 0 {
		errs = append(errs, fmt.Errorf("%d of %d connections failed; the first: %v", r.Failed, r.Conns, r.Failures))
	}
	if r.Bounded {
		errs = append(errs, fmt.Errorf("the client reached its limits (%d connections or %s) before the test stopped it", r.Limits.MaxConns, r.Limits.MaxTime))
	}
	if r.Conns == 0 {
		errs = append(errs, errors.New("the client made no connection"))
	}
	return errors.Join(errs...)
}
