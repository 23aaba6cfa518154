package aws

import (
	"bytes"
	"io"
	"net/http"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
)

// ownBodies wraps the HTTP client of every SDK client of a session: it
// hands the transport a copy of each request's body that nothing
// else closes.
//
// Without it a response can be cut off while it is read. smithy-go closes
// the body it built for an attempt as soon as the HTTP client's Do
// returns, and once closed that body's WriteTo answers io.EOF. Do returns
// with the response headers, and net/http's write loop may not be done
// with the request by then: it copies the Content-Length bytes to the
// connection, and then copies whatever follows them (nothing) to check
// that there is nothing. The server answers as soon as the first copy
// lands; when the SDK closes the body before the second copy, that copy
// fails with io.EOF, and the write loop closes the connection under the
// response body the SDK is decoding ("deserialization failed ... use of
// closed network connection"). A large page (a listing) was the likeliest
// to be cut, on a loaded machine. A body of our own, read from memory, is
// also written with the headers in one flush, so the server cannot answer
// before the write loop is done with it.
type ownBodies struct{ next awssdk.HTTPClient }

// Do sends req with a copy of its body.
func (c ownBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.next.Do(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	own := req.Clone(req.Context())
	own.ContentLength = int64(len(body))
	own.GetBody = func() (io.ReadCloser, error) {
		if len(body) == 0 {
			// A non-nil body of length 0 would be sent chunked.
			return http.NoBody, nil
		}
		return io.NopCloser(bytes.NewReader(body)), nil
	}
	own.Body, _ = own.GetBody()
	return c.next.Do(own)
}
