package chaos_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
)

// awsProxy stands between the controller and the AWS fake, so that AWS can
// fail as a whole: when down, every call is answered with an HTTP 500 and
// the error body each API gives with it (InternalFailure for RDS,
// InternalError for EC2), which the SDK retries and then reports. The fake
// itself answers only errors of the 4xx kind (throttling, AccessDenied), and
// is shared with other packages: its code stays as it is.
type awsProxy struct {
	// URL is the endpoint to give the controller (--aws-endpoint-url).
	URL string

	srv     *httptest.Server
	down    atomic.Bool
	refused atomic.Int64
}

// newAWSProxy starts a proxy to the fake at target on 127.0.0.1.
func newAWSProxy(target string) *awsProxy {
	u, err := url.Parse(target)
	if err != nil {
		panic(fmt.Sprintf("awstest URL %q: %v", target, err))
	}
	p := &awsProxy{}
	forward := httputil.NewSingleHostReverseProxy(u)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.down.Load() {
			forward.ServeHTTP(w, r)
			return
		}
		p.refused.Add(1)
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusInternalServerError)
		if form.Get("Version") == "2016-11-15" { // EC2's Query dialect
			fmt.Fprint(w, `<Response><Errors><Error><Code>InternalError</Code><Message>An internal error has occurred</Message></Error></Errors><RequestID>chaos</RequestID></Response>`)
			return
		}
		fmt.Fprint(w, `<ErrorResponse><Error><Type>Receiver</Type><Code>InternalFailure</Code><Message>The request processing has failed because of an unknown error, exception or failure.</Message></Error><RequestId>chaos</RequestId></ErrorResponse>`)
	}))
	p.URL = p.srv.URL
	return p
}

// setDown makes every call fail with a 500 (true) or reach the fake again.
func (p *awsProxy) setDown(down bool) { p.down.Store(down) }

// Close stops the proxy.
func (p *awsProxy) Close() { p.srv.Close() }
