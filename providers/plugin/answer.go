package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// brokenAnswer is an answer that parses as JSON but is not the protocol's:
// a required field missing or null, a field of the wrong type or over its
// bound. Like garbage, it is the plugin's failure: the source keeps what it
// published, and the message names the field.
type brokenAnswer struct{ msg string }

func (b *brokenAnswer) Error() string { return b.msg }

// brokenf is a brokenAnswer.
func brokenf(format string, args ...any) error {
	return &brokenAnswer{msg: fmt.Sprintf(format, args...)}
}

// hints say how to fix a missing required field, by name.
var hints = map[string]string{
	"endpoints":        `answer "endpoints": [] to mean none`,
	"address":          "every endpoint has its address",
	"serving":          `say "serving": true or false; a missing one is never read as false`,
	"protocolVersions": `list the versions the plugin speaks, such as "protocolVersions": ["v1"]`,
	"error":            `a refusal carries {"error": {"code": ..., "message": ...}}`,
	"code":             "one of InvalidParameters, NotFound, Forbidden, Unavailable",
	"message":          "say what is wrong and how to fix it",
}

// object is one JSON object of an answer, its fields as they came.
type object map[string]json.RawMessage

// maxUnknownNamed bounds how many unknown fields a note names.
const maxUnknownNamed = 8

// readObject reads data, the JSON object at where in an answer ("" for
// the answer itself), as the schema of openapi.yaml says: a required field
// that is missing or null is a brokenAnswer naming it. It adds to unknown
// the fields the schema does not have. Field names are matched exactly
// (encoding/json alone would take "Endpoints" for "endpoints").
func readObject(data json.RawMessage, schema, where string, unknown *[]string) (object, error) {
	var obj object
	err := json.Unmarshal(data, &obj)
	var te *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &te) {
		// Not JSON at all.
		return nil, err
	}
	if err != nil || obj == nil {
		if where == "" {
			return nil, brokenf("plugin answer is not a JSON object of the protocol (openapi.yaml, %s)", schema)
		}
		return nil, brokenf("plugin answer's %s is not a JSON object", where)
	}
	fields := protocol.SchemaFields(schema)
	var extra []string
	for name := range obj {
		if !slices.Contains(fields.Known, name) {
			extra = append(extra, join(where, name))
		}
	}
	slices.Sort(extra)
	*unknown = append(*unknown, extra...)
	for _, name := range fields.Required {
		if raw, ok := obj[name]; !ok || string(raw) == "null" {
			what := "no"
			if ok {
				what = "a null"
			}
			msg := fmt.Sprintf("plugin answer has %s %q field", what, name)
			if where != "" {
				msg = fmt.Sprintf("plugin answer's %s has %s %q field", where, what, name)
			}
			if h := hints[name]; h != "" {
				msg += ": " + h
			}
			if len(extra) > 0 {
				msg += fmt.Sprintf(" (it has %s, which the protocol does not)", quoted(extra))
			}
			return nil, &brokenAnswer{msg: msg}
		}
	}
	return obj, nil
}

// join is the path of field name within where.
func join(where, name string) string {
	name = providers.Printable(name, 64)
	if where == "" {
		return name
	}
	return where + "." + name
}

// quoted lists names, quoted, at most maxUnknownNamed of them.
func quoted(names []string) string {
	out := make([]string, 0, min(len(names), maxUnknownNamed))
	for _, n := range names[:min(len(names), maxUnknownNamed)] {
		out = append(out, fmt.Sprintf("%q", n))
	}
	s := strings.Join(out, ", ")
	if more := len(names) - len(out); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// field decodes obj's field name into v, leaving v as it is when the field
// is absent or null; a value of the wrong type is a brokenAnswer.
func field(obj object, where, name string, v any) error {
	raw, ok := obj[name]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return brokenf("plugin answer's %s is a JSON %s, not %s", join(where, name), te.Value, kindOf(v))
		}
		return brokenf("plugin answer's %s: %s", join(where, name), providers.Printable(err.Error(), protocol.MaxMessageLength))
	}
	return nil
}

// kindOf names the JSON type v takes.
func kindOf(v any) string {
	switch v.(type) {
	case *string:
		return "a string"
	case *bool:
		return "true or false"
	case *int64:
		return "an integer"
	case *[]json.RawMessage, *[]string:
		return "an array"
	}
	return "of its schema's type"
}

// readAnswer reads the body of a 200 answer to resolve, checked against
// openapi.yaml and the provider's maxEndpoints. A broken answer fails as a
// whole: publishing part of it would withdraw the rest.
func readAnswer(body []byte, most int) (answer, error) {
	var unknown []string
	top, err := readObject(body, "ResolveResponse", "", &unknown)
	if err != nil {
		return answer{}, err
	}
	var raws []json.RawMessage
	if err := field(top, "", "endpoints", &raws); err != nil {
		return answer{}, err
	}
	if n := len(raws); n > most {
		return answer{}, brokenf("%d endpoints, more than spec.plugin.maxEndpoints=%d", n, most)
	}
	var index string
	var refresh int64
	if err := field(top, "", "index", &index); err != nil {
		return answer{}, err
	}
	if err := field(top, "", "refreshAfterSeconds", &refresh); err != nil {
		return answer{}, err
	}
	switch {
	case len(index) > protocol.MaxIndexLength:
		return answer{}, brokenf("an index of %d bytes, more than %d", len(index), protocol.MaxIndexLength)
	case refresh < 0:
		return answer{}, brokenf("refreshAfterSeconds %d; 0 (the default, %d) or more", refresh, protocol.DefaultRefreshSeconds)
	}
	ans := answer{endpoints: make([]providers.Endpoint, 0, len(raws)), index: index, refresh: refreshOf(refresh)}
	var notes []string
	for i, raw := range raws {
		where := fmt.Sprintf("endpoints[%d]", i)
		obj, err := readObject(raw, "Endpoint", where, &unknown)
		if err != nil {
			return answer{}, err
		}
		e, note, err := readEndpoint(obj, where)
		if err != nil {
			return answer{}, err
		}
		if note != "" {
			notes = append(notes, note)
		}
		ans.endpoints = append(ans.endpoints, e)
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		notes = append(notes, fmt.Sprintf("%s not in the protocol, ignored (a misspelt field?)", quoted(unknown)))
	}
	if len(notes) > 0 {
		ans.note = "the plugin's answer has " + strings.Join(bounded(notes), "; ")
	}
	return ans, nil
}

// bounded keeps at most maxUnknownNamed notes, saying how many it left out.
func bounded(notes []string) []string {
	if len(notes) <= maxUnknownNamed {
		return notes
	}
	return append(slices.Clip(notes[:maxUnknownNamed]), fmt.Sprintf("and %d more", len(notes)-maxUnknownNamed))
}

// readEndpoint reads one endpoint of an answer, checked against the
// protocol's bounds. A hostname that is not a DNS-1123 label cannot be
// published: the endpoint is published without it, and the note says so.
// What an address may be is normalisation's to decide, as for every
// source; here only what would cost memory or make no sense.
func readEndpoint(obj object, where string) (providers.Endpoint, string, error) {
	var e providers.Endpoint
	var port int64
	// In the document's order, so that the same broken answer always
	// names the same field.
	for _, f := range []struct {
		name string
		v    any
	}{{"address", &e.Address}, {"serving", &e.Serving}, {"terminating", &e.Terminating},
		{"zone", &e.Zone}, {"hostname", &e.Hostname}, {"port", &port}} {
		if err := field(obj, where, f.name, f.v); err != nil {
			return e, "", err
		}
	}
	switch {
	case e.Address == "" || len(e.Address) > protocol.MaxAddressLength:
		return e, "", brokenf("%s.address of %d bytes; 1 to %d", where, len(e.Address), protocol.MaxAddressLength)
	case len(e.Zone) > protocol.MaxZoneLength:
		return e, "", brokenf("%s.zone of %d bytes; at most %d", where, len(e.Zone), protocol.MaxZoneLength)
	case len(e.Hostname) > protocol.MaxHostnameLength:
		return e, "", brokenf("%s.hostname of %d bytes; at most %d", where, len(e.Hostname), protocol.MaxHostnameLength)
	case port < 0 || port > 65535:
		return e, "", brokenf("%s.port %d; 0 to 65535", where, port)
	}
	e.Port = int32(port)
	var note string
	if e.Hostname != "" && len(validation.IsDNS1123Label(e.Hostname)) > 0 {
		note = fmt.Sprintf("%s.hostname %q, not a DNS-1123 label: published without it", where, providers.Printable(e.Hostname, protocol.MaxHostnameLength))
		e.Hostname = ""
	}
	return e, note, nil
}

// refreshOf is when a plugin that does not push is asked again: seconds
// (never negative: readAnswer refuses that) at most MaxRefreshSeconds, 0
// taken as DefaultRefreshSeconds.
func refreshOf(seconds int64) time.Duration {
	if seconds == 0 {
		seconds = protocol.DefaultRefreshSeconds
	}
	return time.Duration(min(seconds, protocol.MaxRefreshSeconds)) * time.Second
}

// readInfo reads the body of a 200 answer to info. Unknown fields are
// ignored: info is asked for the handshake, not shown on a source.
func readInfo(body []byte) (protocol.Info, error) {
	var ignored []string
	obj, err := readObject(body, "Info", "", &ignored)
	if err != nil {
		return protocol.Info{}, err
	}
	var info protocol.Info
	for _, f := range []struct {
		name string
		v    any
	}{{"protocolVersions", &info.ProtocolVersions}, {"name", &info.Name}, {"pluginVersion", &info.PluginVersion}} {
		if err := field(obj, "", f.name, f.v); err != nil {
			return protocol.Info{}, err
		}
	}
	return info, nil
}

// readRefusal reads the body of an answer other than 200: an
// ErrorResponse, its code and message required.
func readRefusal(body []byte) (protocol.Error, error) {
	var ignored []string
	top, err := readObject(body, "ErrorResponse", "", &ignored)
	if err != nil {
		return protocol.Error{}, err
	}
	obj, err := readObject(top["error"], "Error", "error", &ignored)
	if err != nil {
		return protocol.Error{}, err
	}
	var e protocol.Error
	if err := field(obj, "error", "code", &e.Code); err != nil {
		return protocol.Error{}, err
	}
	if err := field(obj, "error", "message", &e.Message); err != nil {
		return protocol.Error{}, err
	}
	if e.Code == "" {
		return protocol.Error{}, brokenf(`plugin answer's error.code is empty: %s`, hints["code"])
	}
	return e, nil
}
