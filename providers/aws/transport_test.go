package aws

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go/middleware"

	"github.com/backendslice/backendslice/test/awstest"
)

// TestResponseOutlivesRequestBody forces the interleaving that cut
// listings off on a loaded machine (see ownBodies): the write loop of
// net/http is held right after the request's bytes reach the fake, until
// the SDK has its response and has closed the request body; only then
// does the write loop finish the request, and only then does the SDK
// decode the response, a page of 200 instances, larger than what the
// transport reads with the headers. With the SDK's own client the write
// loop fails and closes the connection under the response (which shows
// that the interleaving is forced); with the session's, the page is read
// whole.
func TestResponseOutlivesRequestBody(t *testing.T) {
	fake := awstest.New()
	t.Cleanup(fake.Close)
	for n := range 200 {
		fake.PutEC2Instance(awstest.EC2Instance{ID: fmt.Sprintf("i-%04d", n), State: "running",
			PrivateIP: fmt.Sprintf("192.0.2.%d", n+1), Zone: "eu-west-1a", Tags: map[string]string{"app": "a"}})
	}
	for _, tc := range []struct {
		name   string
		client func(dial func(*http.Transport)) awssdk.HTTPClient
		cut    bool
	}{
		{"the SDK's client", func(dial func(*http.Transport)) awssdk.HTTPClient {
			return awshttp.NewBuildableClient().WithTransportOptions(dial)
		}, true},
		{"the session's client", func(dial func(*http.Transport)) awssdk.HTTPClient {
			return ownBodies{awshttp.NewBuildableClient().WithTransportOptions(dial)}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeldWrites()
			client := ec2.New(ec2.Options{
				Region:           "eu-west-1",
				BaseEndpoint:     awssdk.String(fake.URL),
				Credentials:      credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
				HTTPClient:       tc.client(h.dial),
				RetryMaxAttempts: 1,
			})
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				WroteRequest: func(i httptrace.WroteRequestInfo) { h.wrote <- i.Err },
			})
			out, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}, func(o *ec2.Options) {
				o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
					return s.Deserialize.Add(h, middleware.After)
				})
			})
			switch {
			case tc.cut && err == nil:
				t.Fatalf("the SDK's client read the whole page: the interleaving was not forced")
			case tc.cut:
				t.Logf("cut off as expected: %v", err)
			case err != nil:
				t.Fatalf("DescribeInstances: %v", err)
			case len(out.Reservations) != 200:
				t.Fatalf("%d reservations, want 200", len(out.Reservations))
			}
		})
	}
}

// heldWrites holds the connections' write loops: a write that completes a
// request (its headers and Content-Length bytes) returns only once the
// SDK has the response, which it then decodes only once the write loop is
// done with the request, and, when the write loop failed, has closed the
// connection.
type heldWrites struct {
	release chan struct{}
	once    sync.Once
	// wrote is the request's write result (httptrace's WroteRequest).
	wrote chan error
	// closed is closed when a connection is.
	closed    chan struct{}
	closeOnce sync.Once
}

func newHeldWrites() *heldWrites {
	return &heldWrites{release: make(chan struct{}), wrote: make(chan error, 1), closed: make(chan struct{})}
}

// dial makes the transport dial connections whose writes are held.
func (h *heldWrites) dial(tr *http.Transport) {
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &heldConn{Conn: c, h: h}, nil
	}
}

// ID names the middleware in the SDK's stack.
func (*heldWrites) ID() string { return "HeldWrites" }

// HandleDeserialize runs innermost in the deserialize step: the HTTP
// client has returned and smithy-go has closed the request body when next
// returns; the operation's deserializer reads the response after it
// returns.
func (h *heldWrites) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleDeserialize(ctx, in)
	h.once.Do(func() { close(h.release) })
	if werr := <-h.wrote; werr != nil {
		<-h.closed
	}
	return out, md, err
}

// contentLength finds a request's Content-Length header.
var contentLength = regexp.MustCompile(`(?i)\r\ncontent-length: *(\d+)\r\n`)

// heldConn is a connection whose write that completes the request waits
// for heldWrites.release.
type heldConn struct {
	net.Conn
	h *heldWrites

	mu      sync.Mutex
	written []byte
}

func (c *heldConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.written = append(c.written, p[:n]...)
	complete := false
	if end := bytes.Index(c.written, []byte("\r\n\r\n")); end >= 0 {
		if m := contentLength.FindSubmatch(c.written[:end+2]); m != nil {
			cl, _ := strconv.Atoi(string(m[1]))
			complete = len(c.written) >= end+4+cl
		}
	}
	c.mu.Unlock()
	if complete {
		<-c.h.release
	}
	return n, err
}

func (c *heldConn) Close() error {
	c.h.closeOnce.Do(func() { close(c.h.closed) })
	return c.Conn.Close()
}

// clientFunc is an HTTP client that calls a function.
type clientFunc func(*http.Request) (*http.Response, error)

func (f clientFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// closeCounter counts the closes of a request body.
type closeCounter struct {
	io.Reader
	closes int
}

func (c *closeCounter) Close() error { c.closes++; return nil }

// TestOwnBodiesCopies: the transport gets a body of its own with the same
// bytes and length, which it can read again (GetBody), the SDK's is read
// and closed, and an empty body goes as none (not chunked).
func TestOwnBodiesCopies(t *testing.T) {
	for _, body := range []string{"Action=DescribeInstances&Version=2016-11-15", ""} {
		orig := &closeCounter{Reader: strings.NewReader(body)}
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", orig)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(body))
		var sent *http.Request
		resp, err := ownBodies{clientFunc(func(r *http.Request) (*http.Response, error) {
			sent = r
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
		})}.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if sent == nil || sent.Body == req.Body {
			t.Fatalf("body %q: the transport got the SDK's body", body)
		}
		if orig.closes != 1 {
			t.Errorf("body %q: the SDK's body closed %d times, want 1", body, orig.closes)
		}
		if sent.ContentLength != int64(len(body)) {
			t.Errorf("body %q: ContentLength %d", body, sent.ContentLength)
		}
		if body == "" && sent.Body != http.NoBody {
			t.Errorf("an empty body goes as %T, want http.NoBody", sent.Body)
		}
		for range 2 {
			got, err := io.ReadAll(sent.Body)
			if err != nil || string(got) != body {
				t.Errorf("body %q: read %q, %v", body, got, err)
			}
			if sent.Body, err = sent.GetBody(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
