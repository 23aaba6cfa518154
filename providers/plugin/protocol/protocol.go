// Package protocol holds the wire types of the provider plugin protocol,
// version 1: what the controller (providers/plugin) sends a plugin and
// what the plugin answers, as openapi.yaml in this folder describes them.
// The OpenAPI document is the contract; these types follow it, and a test
// checks that they do. A plugin in Go builds on the SDK (providers/plugin/sdk);
// one in any other language needs only the document (docs/plugins.md).
package protocol

import (
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"sync"

	"sigs.k8s.io/yaml"
)

// Version is the protocol version this package speaks: the path segment
// of every operation, and what Info.ProtocolVersions must list.
const Version = "v1"

// Paths of the operations, below the url a BackendProvider names.
const (
	// InfoPath answers GET with Info: the handshake, and the connection
	// check behind a BackendProvider's Ready condition.
	InfoPath = "/backendslice/" + Version + "/info"
	// ResolvePath answers POST of a ResolveRequest with a ResolveResponse
	// or an ErrorResponse.
	ResolvePath = "/backendslice/" + Version + "/resolve"
)

// OpenAPI is the protocol's document, openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Info is what a plugin says of itself.
type Info struct {
	// ProtocolVersions are the protocol versions the plugin speaks; the
	// controller uses a plugin only when Version is among them.
	ProtocolVersions []string `json:"protocolVersions"`
	// Name and PluginVersion name the plugin, for messages and logs.
	Name          string `json:"name,omitempty"`
	PluginVersion string `json:"pluginVersion,omitempty"`
}

// ResolveRequest asks for the endpoints of one source of one ExternalBackend.
type ResolveRequest struct {
	// Namespace and Backend name the ExternalBackend, and Source its
	// source: the plugin applies its own consent rules to them.
	Namespace string `json:"namespace"`
	Backend   string `json:"backend"`
	Source    string `json:"source"`
	// Parameters are the source's spec.sources[].plugin.parameters.
	Parameters map[string]string `json:"parameters"`
	// AddressTypes are the families the backend publishes (IPv4, IPv6,
	// FQDN): a plugin may leave out what is not asked for.
	AddressTypes []string `json:"addressTypes"`
	// Index, when set, is the index of the plugin's last answer: the
	// plugin holds the request until its answer would carry another index,
	// or WaitSeconds have passed (a long-poll, as Consul's blocking queries).
	Index string `json:"index,omitempty"`
	// WaitSeconds is how long a long-poll may be held (MinWaitSeconds to
	// MaxWaitSeconds); set with Index.
	WaitSeconds int `json:"waitSeconds,omitempty"`
}

// ResolveResponse is the endpoints of one source.
type ResolveResponse struct {
	// Endpoints of the backend, in any order.
	Endpoints []Endpoint `json:"endpoints"`
	// RefreshAfterSeconds is when a plugin that does not push wants to be
	// asked again: 30 when 0 or unset, 3600 when larger, ignored when the
	// answer carries an index; a negative one breaks the answer.
	RefreshAfterSeconds int `json:"refreshAfterSeconds,omitempty"`
	// Index, when set, says the plugin pushes: the next request carries it
	// and is held until the answer changes. At most MaxIndexLength bytes.
	Index string `json:"index,omitempty"`
}

// Endpoint is one address of a backend.
type Endpoint struct {
	// Address is an IPv4 or IPv6 address, or a DNS name (published only
	// where the backend asks for FQDN).
	Address string `json:"address"`
	// Serving is true when the endpoint can take traffic.
	Serving bool `json:"serving"`
	// Terminating is true when the endpoint is going away: it is
	// published not ready while it drains.
	Terminating bool `json:"terminating,omitempty"`
	// Zone is the endpoint's zone, for topology hints.
	Zone string `json:"zone,omitempty"`
	// Hostname is a DNS-1123 label naming the endpoint.
	Hostname string `json:"hostname,omitempty"`
	// Port is the backend's own port (0: the Service's targetPort).
	Port int32 `json:"port,omitempty"`
}

// ErrorResponse is a plugin's refusal or failure, with any status but 200.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// Error says why a plugin did not answer with endpoints.
type Error struct {
	// Code is one of the Code constants; another reads as CodeUnavailable.
	Code string `json:"code"`
	// Message says what is wrong and how to fix it; the controller shows
	// at most MaxMessageLength bytes of it, on one printable line.
	Message string `json:"message"`
}

// Error codes, and what the controller makes of them.
const (
	// CodeInvalidParameters: the parameters are wrong (InvalidSpec on
	// status, with the message); nothing is published from them.
	CodeInvalidParameters = "InvalidParameters"
	// CodeNotFound: the backend does not exist (BackendNotFound); what
	// the source published drains.
	CodeNotFound = "NotFound"
	// CodeForbidden: the plugin's own rules refuse this namespace or
	// backend (AccessDenied); what the source published is kept.
	CodeForbidden = "Forbidden"
	// CodeUnavailable: the plugin cannot answer now (SourceFailed); what
	// the source published is kept and the request is retried.
	CodeUnavailable = "Unavailable"
	// CodeUnauthorized: the bearer token is not the one the plugin
	// expects (AccessDenied); what the source published is kept. Sent
	// with status 401, which decides whatever the body says.
	CodeUnauthorized = "Unauthorized"
)

// statusOf is the one HTTP status of each error code.
var statusOf = map[string]int{
	CodeInvalidParameters: 422,
	CodeNotFound:          404,
	CodeForbidden:         403,
	CodeUnavailable:       503,
	CodeUnauthorized:      401,
}

// StatusOf is the HTTP status a plugin answers code with; 0 for a code
// the protocol does not have (the controller reads it as Unavailable).
func StatusOf(code string) int { return statusOf[code] }

// Codes are the error codes of the protocol, in the document's order.
var Codes = []string{CodeInvalidParameters, CodeNotFound, CodeForbidden, CodeUnavailable, CodeUnauthorized}

// Limits of the protocol.
const (
	// MaxIndexLength bounds an answer's index.
	MaxIndexLength = 128
	// MaxMessageLength bounds the part of an error message the controller shows.
	MaxMessageLength = 512
	// MaxAddressLength, MaxZoneLength and MaxHostnameLength bound an endpoint's fields.
	MaxAddressLength  = 253
	MaxZoneLength     = 63
	MaxHostnameLength = 63
	// ResponseBaseBytes and ResponseBytesPerEndpoint bound the size of an
	// answer: the base plus so much for each endpoint the provider allows.
	ResponseBaseBytes        = 64 << 10
	ResponseBytesPerEndpoint = 512
	// MaxResponseHeaderBytes bounds the headers of an answer: the status
	// line and every header line, as net/http counts them.
	MaxResponseHeaderBytes = 32 << 10
	// DefaultRefreshSeconds is what a RefreshAfterSeconds of 0 (or none)
	// means, and MaxRefreshSeconds what a larger one is read as; a
	// negative one breaks the answer.
	MaxRefreshSeconds     = 3600
	DefaultRefreshSeconds = 30
	// MinWaitSeconds and MaxWaitSeconds bound the waitSeconds the
	// controller sends (--plugin-wait is kept between them).
	MinWaitSeconds = 1
	MaxWaitSeconds = 600
	// InfoSeconds is how quickly a plugin answers info.
	InfoSeconds = 1
)

// MaxResponseBytes is the largest answer the controller reads from a
// plugin whose answers may carry at most maxEndpoints endpoints.
func MaxResponseBytes(maxEndpoints int) int64 {
	return ResponseBaseBytes + int64(maxEndpoints)*ResponseBytesPerEndpoint
}

// Fields are the properties one schema of openapi.yaml has, and those it
// requires: what a reader of an answer checks the answer against, so that
// the document stays the one place that says it.
type Fields struct {
	// Known are the schema's properties, Required those it requires.
	Known, Required []string
}

// schemaFields are the Fields of every schema of the document, read once.
var schemaFields = sync.OnceValue(func() map[string]Fields {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string       `json:"required"`
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		// The document is embedded: a test reads it on every build.
		panic(fmt.Sprintf("protocol: openapi.yaml does not parse: %v", err))
	}
	out := make(map[string]Fields, len(doc.Components.Schemas))
	for name, s := range doc.Components.Schemas {
		known := slices.Sorted(maps.Keys(s.Properties))
		out[name] = Fields{Known: known, Required: slices.Clone(s.Required)}
	}
	return out
})

// SchemaFields are the Fields of the schema name of openapi.yaml (Info,
// ResolveResponse, Endpoint, ErrorResponse, Error); none for another name.
func SchemaFields(name string) Fields { return schemaFields()[name] }
