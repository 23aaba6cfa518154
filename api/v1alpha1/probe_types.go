package v1alpha1

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Probe defaults. The API server applies them through the
// +kubebuilder:default markers of Probe and HTTPProbe, which cannot name a
// constant and so repeat these values (a test compares the generated CRD
// with them); the controller applies them to probes that reach it without
// the API server's defaulting (render, unit tests). The status codes an
// HTTP probe accepts by default are probe.DefaultStatusCodes.
const (
	DefaultProbePeriod           = 10 * time.Second
	DefaultProbeTimeout          = time.Second
	DefaultProbeSuccessThreshold = 1
	DefaultProbeFailureThreshold = 3
	DefaultProbeInitialState     = ProbeStateReady
	DefaultProbeFailOpen         = true
	DefaultHTTPProbeScheme       = HTTPSchemeHTTP
	DefaultHTTPProbePath         = "/"
)

// HTTP probe path bounds, as the CRD's markers on HTTPProbe.Path write
// them (TestPathBoundsAreTheCRDs compares the generated CRD with them): the controller
// checks them again for objects stored before they existed.
const (
	HTTPProbePathMaxLength = 256
	HTTPProbePathPattern   = `^/([A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})*([?]([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?$`
)

// ValidHTTPProbePath tells whether path is within the bounds of
// HTTPProbe.Path: HTTPProbePathPattern and HTTPProbePathMaxLength, checked
// by hand so that no regular expression is compiled per reconcile.
func ValidHTTPProbePath(path string) bool {
	if len(path) > HTTPProbePathMaxLength || !strings.HasPrefix(path, "/") {
		return false
	}
	inQuery := false
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '%':
			if i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2]) {
				return false
			}
			i += 2
		case c == '?' && !inQuery:
			inQuery = true
		case c == '?', isURLChar(c):
		default:
			return false
		}
	}
	return true
}

// isURLChar tells whether c may stand unescaped in a URL's path or query
// (RFC 3986's unreserved and sub-delims, ':', '@' and '/').
func isURLChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// ProbeState is an endpoint's probe verdict before its first result.
// +kubebuilder:validation:Enum=Ready;NotReady
type ProbeState string

// Probe states before the first result.
const (
	// ProbeStateReady publishes the endpoint as its source says until the
	// probe has failed failureThreshold times.
	ProbeStateReady ProbeState = "Ready"
	// ProbeStateNotReady publishes the endpoint not ready until the probe
	// has passed successThreshold times.
	ProbeStateNotReady ProbeState = "NotReady"
)

// HTTPScheme is the scheme of an HTTP probe.
// +kubebuilder:validation:Enum=HTTP;HTTPS
type HTTPScheme string

// HTTP probe schemes.
const (
	HTTPSchemeHTTP  HTTPScheme = "HTTP"
	HTTPSchemeHTTPS HTTPScheme = "HTTPS"
)

// Probe checks each endpoint from the controller's Pod, for backends whose
// source says nothing of their health (a static VM, a DNS name) or says too
// little. A probe can take an endpoint out of service; it never puts back
// one its source calls unhealthy, and never brings a draining one back.
// Probes test reachability from the controller's network, not from each
// client's.
// +kubebuilder:validation:XValidation:rule="(has(self.tcp) ? 1 : 0) + (has(self.http) ? 1 : 0) + (has(self.grpc) ? 1 : 0) == 1",message="probe: set exactly one of tcp, http, grpc"
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || !has(self.period) || !self.timeout.matches('^(([0-9]+[.]?[0-9]*|[.][0-9]+)(ms|s|m|h))+$') || !self.period.matches('^(([0-9]+[.]?[0-9]*|[.][0-9]+)(ms|s|m|h))+$') || duration(self.timeout) < duration(self.period)",message="probe.timeout: must be shorter than probe.period"
type Probe struct {
	// tcp passes when a TCP connection opens.
	// +optional
	TCP *TCPProbe `json:"tcp,omitempty"`

	// http passes when a GET answers with one of statusCodes. Redirects are
	// not followed: a 3xx is judged as it is.
	// +optional
	HTTP *HTTPProbe `json:"http,omitempty"`

	// grpc passes when the gRPC health protocol (grpc.health.v1) answers
	// SERVING.
	// +optional
	GRPC *GRPCProbe `json:"grpc,omitempty"`

	// port to probe; defaults to the port each endpoint is published on
	// for the Service's first port (its targetPort). A probe goes only to
	// a target port of the Service, or to a port every BackendProvider of
	// the endpoint allows in spec.probes.allowedPorts: a probe elsewhere is
	// not sent, and Probed says ProbePortNotAllowed.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// period between two probes of an endpoint, 1s to 1h.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^(([0-9]+[.]?[0-9]*|[.][0-9]+)(ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="probe.period: write a duration from 1s to 1h, such as 10s"
	Period *metav1.Duration `json:"period,omitempty"`

	// timeout of one probe, shorter than the period.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^(([0-9]+[.]?[0-9]*|[.][0-9]+)(ms|s|m|h))+$') && duration(self) >= duration('10ms')",message="probe.timeout: write a duration of 10ms or more, such as 1s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// successThreshold is how many passes in a row make a failing endpoint
	// ready again.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SuccessThreshold int32 `json:"successThreshold,omitempty"`

	// failureThreshold is how many failures in a row take an endpoint out.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureThreshold int32 `json:"failureThreshold,omitempty"`

	// initialState is the verdict before the first results: Ready (the
	// default) publishes the endpoint as its source says until it has
	// failed failureThreshold times; NotReady holds it out until it has
	// passed successThreshold times.
	// +optional
	// +kubebuilder:default=Ready
	InitialState ProbeState `json:"initialState,omitempty"`

	// failOpen, when every probed endpoint of the backend fails, publishes
	// them as their sources say, without the probes' verdict: sending to
	// all is better than sending to none when the probes, not the
	// backends, are what broke. Ready's message and a Warning event say so.
	// +optional
	// +kubebuilder:default=true
	FailOpen *bool `json:"failOpen,omitempty"`
}

// TCPProbe opens a TCP connection.
type TCPProbe struct{}

// HTTPProbe sends a GET.
// +kubebuilder:validation:XValidation:rule="self.scheme != 'HTTPS' || has(self.serverName)",message="probe.http.serverName: required with scheme HTTPS: endpoints are addressed by IP, so name the one their certificates carry"
// +kubebuilder:validation:XValidation:rule="self.scheme == 'HTTPS' || (!has(self.serverName) && !has(self.caSecretRef))",message="probe.http: serverName and caSecretRef apply to scheme HTTPS only"
type HTTPProbe struct {
	// scheme is HTTP (the default) or HTTPS.
	// +optional
	// +kubebuilder:default=HTTP
	Scheme HTTPScheme `json:"scheme,omitempty"`

	// path of the request, and its query after '?': at most 256
	// characters of those a URL's path and query may hold unescaped
	// (RFC 3986), and %XX escapes; no fragment.
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule=`self.matches("^/([A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})*([?]([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?$")`,message="probe.http.path: write '/' and a path, then a query after '?' if any, of letters, digits, -._~!$&'()*+,;=:@/ and %XX escapes; no spaces, '#' or other characters"
	Path string `json:"path,omitempty"`

	// statusCodes that pass: codes (200) and ranges (200-299); 200-399
	// when unset. They decide pass or fail only: neither status nor events
	// say which code an endpoint answered.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:Pattern=`^[1-5][0-9][0-9](-[1-5][0-9][0-9])?$`
	StatusCodes []string `json:"statusCodes,omitempty"`

	// caSecretRef holds the PEM certificates of the CAs that sign the
	// endpoints' certificates (HTTPS), in a Secret of the controller's own
	// namespace that the platform team offers for probes (the controller's
	// --probe-ca-secrets); the system's roots when unset.
	// +optional
	CASecretRef *SecretKeyReference `json:"caSecretRef,omitempty"`

	// serverName is sent as SNI and verified in the certificate (HTTPS);
	// required for HTTPS, since the endpoints are addressed by IP.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ServerName string `json:"serverName,omitempty"`
}

// GRPCProbe asks the gRPC health service (grpc.health.v1.Health/Check),
// in plaintext.
type GRPCProbe struct {
	// service to ask about; the server's overall health when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Service string `json:"service,omitempty"`
}
