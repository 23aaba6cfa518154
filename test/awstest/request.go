package awstest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// request is one call as it came on the wire: a Query form, or a JSON
// body and the target that names its action.
type request struct {
	action string
	// form holds a Query call's parameters; json a JSON call's body.
	form url.Values
	json map[string]any
	// target is the API a JSON call's X-Amz-Target names ("" for Query).
	target string
}

// service is the signing service whose error shape a request that names
// no known action is answered in.
func (r request) service() string {
	if r.target != "" {
		return "memorydb"
	}
	return "rds"
}

// version is the API version a Query call names, or the API a JSON call's
// target names: each must be the one of its action.
func (r request) version() string {
	if r.target != "" {
		return r.target
	}
	return r.form.Get("Version")
}

// readRequest reads a POST of either protocol, answering a malformed one.
func readRequest(w http.ResponseWriter, r *http.Request) (request, bool) {
	if r.Method != http.MethodPost {
		writeError(w, "rds", "MalformedQueryString", "requests are POSTs")
		return request{}, false
	}
	target := r.Header.Get("X-Amz-Target")
	if target == "" {
		if err := r.ParseForm(); err != nil {
			writeError(w, "rds", "MalformedQueryString", "requests are form-encoded POSTs")
			return request{}, false
		}
		return request{action: r.PostForm.Get("Action"), form: r.PostForm}, true
	}
	api, action, ok := strings.Cut(target, ".")
	req := request{action: action, target: api, json: map[string]any{}}
	if !ok || r.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
		writeJSONError(w, "SerializationException", "X-Amz-Target must be <API>.<action> and Content-Type application/x-amz-json-1.1")
		return request{}, false
	}
	body, err := io.ReadAll(r.Body)
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &req.json)
	}
	if err != nil {
		writeJSONError(w, "SerializationException", "the body is not a JSON object")
		return request{}, false
	}
	return req, true
}

// str is a string member of a JSON call's body, "" when absent.
func (r request) str(name string) string {
	v, _ := r.json[name].(string)
	return v
}

// jsonError is the JSON 1.1 protocol's error body.
type jsonError struct {
	Type    string `json:"__type"`
	Message string `json:"message"`
}

// writeJSONError answers a JSON call's failure: the code in the
// X-Amzn-ErrorType header and the body, as AWS answers it.
func writeJSONError(w http.ResponseWriter, code, msg string) {
	w.Header().Set("X-Amzn-ErrorType", code)
	writeJSON(w, statusOf(code), jsonError{Type: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	out, err := json.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", requestID)
	w.WriteHeader(status)
	_, _ = w.Write(out)
}
