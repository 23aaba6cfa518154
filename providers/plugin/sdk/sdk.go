// Package sdk turns a Go function into a provider plugin: an http.Handler
// that speaks the plugin protocol (providers/plugin/protocol), checks the
// controller's token, validates parameters before anything else, applies
// the plugin's consent rules before it looks anything up, and, for a
// plugin that pushes, holds the controller's long-polls until the plugin
// says its inventory changed.
//
//	p := &sdk.Plugin{
//		Name: "inventory",
//		Validate: func(r sdk.Request) error { ... sdk.InvalidParameters("...") },
//		Admit:    func(ctx context.Context, r sdk.Request) error { ... sdk.Forbidden("...") },
//		Resolve:  func(ctx context.Context, r sdk.Request) (sdk.Answer, error) { ... },
//		Push:     true,
//	}
//	http.ListenAndServe("127.0.0.1:9000", p.Handler())
//	...
//	p.Changed() // when the inventory changed: held long-polls answer at once
package sdk

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// Request is what the controller asks: the endpoints of one source of one
// ExternalBackend.
type Request struct {
	// Namespace and Backend name the ExternalBackend, Source its source:
	// for the plugin's own consent rules.
	Namespace, Backend, Source string
	// Parameters are the source's parameters, as the tenant wrote them.
	Parameters map[string]string
	// AddressTypes are the families the backend publishes.
	AddressTypes []string
}

// Endpoint is one address of a backend, as the protocol carries it.
type Endpoint = protocol.Endpoint

// Answer is what Resolve found.
type Answer struct {
	// Endpoints of the backend, in any order.
	Endpoints []Endpoint
	// RefreshAfter is when a plugin that does not push is asked again
	// (whole seconds; 30s when zero).
	RefreshAfter time.Duration
}

// Error is a refusal or failure with the protocol's code; build one with
// InvalidParameters, NotFound, Forbidden or Unavailable. Any other error
// Resolve returns is answered as Unavailable.
type Error struct {
	Code, Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Each code is answered with its one status, protocol.StatusOf.

// InvalidParameters says the parameters are wrong: the source says
// InvalidSpec with the message.
func InvalidParameters(format string, args ...any) error {
	return &Error{protocol.CodeInvalidParameters, fmt.Sprintf(format, args...)}
}

// NotFound says the backend does not exist: what it published drains.
func NotFound(format string, args ...any) error {
	return &Error{protocol.CodeNotFound, fmt.Sprintf(format, args...)}
}

// Forbidden says the plugin's own rules refuse the namespace or backend;
// Admit returns it, for a backend that exists or not alike.
func Forbidden(format string, args ...any) error {
	return &Error{protocol.CodeForbidden, fmt.Sprintf(format, args...)}
}

// Unavailable says the plugin cannot answer now: the source keeps what it
// published and is asked again.
func Unavailable(format string, args ...any) error {
	return &Error{protocol.CodeUnavailable, fmt.Sprintf(format, args...)}
}

// DefaultMaxWait bounds how long a long-poll is held, whatever the
// controller asks (waitSeconds, 60 by default, at most 600).
const DefaultMaxWait = 5 * time.Minute

// maxRequestBytes bounds a request's body: the CRD bounds parameters
// to 32 keys of 63 and values of 1024.
const maxRequestBytes = 256 << 10

// Plugin is a provider plugin: fill in the fields, serve Handler, and call
// Changed whenever what Resolve would answer may have changed.
type Plugin struct {
	// Name and Version name the plugin in its info.
	Name, Version string
	// Validate checks a request's parameters before anything else; nil
	// accepts every one. Return InvalidParameters to refuse.
	Validate func(Request) error
	// Admit applies the plugin's consent rules to the request's
	// namespace, backend and parameters, after Validate and before
	// Resolve, every time Resolve is asked (also in a held long-poll, so
	// that consent taken back applies at once). It refuses with Forbidden
	// whether or not what the parameters name exists, and with a message
	// that does not tell which: NotFound is for Resolve only, so that a
	// namespace learns what exists only of what it may see. Any error
	// Admit returns but Unavailable is answered as Forbidden. Required:
	// Handler panics without it; AdmitEveryNamespace admits all.
	Admit func(context.Context, Request) error
	// Resolve answers an admitted request; it must be read-only and
	// idempotent.
	Resolve func(context.Context, Request) (Answer, error)
	// Push makes the plugin push: answers carry an index (a hash of the
	// endpoints), and a long-poll is held until Changed makes Resolve
	// answer otherwise, or its wait ends.
	Push bool
	// Token, when set, returns the bearer token every request must carry;
	// asked for each request, so a rotated token applies at once.
	Token func() string
	// MaxWait bounds a long-poll's wait; DefaultMaxWait when zero.
	MaxWait time.Duration

	mu      sync.Mutex
	changed chan struct{}
}

// Changed wakes every held long-poll: each resolves again, and answers if
// its answer changed.
func (p *Plugin) Changed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
}

// changes is closed at the next Changed.
func (p *Plugin) changes() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// AdmitEveryNamespace is the Admit of a plugin without consent rules:
// every namespace may publish every backend, and learn which exist.
func AdmitEveryNamespace(context.Context, Request) error { return nil }

// Handler serves the protocol's operations. It panics when Admit or
// Resolve is nil: a plugin states its consent rules, even "none".
func (p *Plugin) Handler() http.Handler {
	if p.Admit == nil || p.Resolve == nil {
		panic("sdk: a Plugin needs Resolve and Admit (its consent rules, checked before Resolve; sdk.AdmitEveryNamespace for none)")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.InfoPath, p.authorized(p.info))
	mux.HandleFunc("POST "+protocol.ResolvePath, p.authorized(p.resolve))
	return mux
}

// authorized refuses a request without the token, when there is one.
func (p *Plugin) authorized(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p.Token != nil {
			want := "Bearer " + p.Token()
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
				writeFailure(w, &Error{protocol.CodeUnauthorized, "a bearer token is required, and this is not it"})
				return
			}
		}
		next(w, r)
	}
}

func (p *Plugin) info(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, protocol.Info{ProtocolVersions: []string{protocol.Version}, Name: p.Name, PluginVersion: p.Version})
}

func (p *Plugin) resolve(w http.ResponseWriter, r *http.Request) {
	var in protocol.ResolveRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes)).Decode(&in); err != nil {
		writeFailure(w, &Error{protocol.CodeUnavailable, "the request is not the protocol's JSON: " + err.Error()})
		return
	}
	req := Request{Namespace: in.Namespace, Backend: in.Backend, Source: in.Source, Parameters: in.Parameters, AddressTypes: in.AddressTypes}
	if p.Validate != nil {
		if err := p.Validate(req); err != nil {
			writeFailure(w, err)
			return
		}
	}
	maxWait := p.MaxWait
	if maxWait <= 0 {
		maxWait = DefaultMaxWait
	}
	deadline := time.Now().Add(min(time.Duration(in.WaitSeconds)*time.Second, maxWait))
	for {
		// Taken before resolving, so that a change during Resolve is not missed.
		changed := p.changes()
		if err := p.admit(r.Context(), req); err != nil {
			writeFailure(w, err)
			return
		}
		ans, err := p.Resolve(r.Context(), req)
		if err != nil {
			writeFailure(w, err)
			return
		}
		out := protocol.ResolveResponse{Endpoints: ans.Endpoints, RefreshAfterSeconds: int(ans.RefreshAfter / time.Second)}
		if out.Endpoints == nil {
			out.Endpoints = []Endpoint{}
		}
		if !p.Push {
			writeJSON(w, http.StatusOK, out)
			return
		}
		out.Index = IndexOf(ans.Endpoints)
		wait := time.Until(deadline)
		if in.Index == "" || out.Index != in.Index || wait <= 0 {
			writeJSON(w, http.StatusOK, out)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// IndexOf is the index of an answer: a hash of its endpoints, whatever
// their order, so that it changes exactly when they do.
func IndexOf(eps []Endpoint) string {
	lines := make([]string, 0, len(eps))
	for _, e := range eps {
		b, _ := json.Marshal(e)
		lines = append(lines, string(b))
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:12])
}

// admit runs Admit: its refusal is Forbidden whatever it says, but for
// Unavailable (the rules cannot be read now).
func (p *Plugin) admit(ctx context.Context, req Request) error {
	err := p.Admit(ctx, req)
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && (e.Code == protocol.CodeForbidden || e.Code == protocol.CodeUnavailable) {
		return e
	}
	return &Error{protocol.CodeForbidden, err.Error()}
}

// writeFailure answers err with its code's one status (protocol.StatusOf);
// an error of no code, or of a code the protocol does not have, is
// Unavailable.
func writeFailure(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) || protocol.StatusOf(e.Code) == 0 {
		e = &Error{protocol.CodeUnavailable, err.Error()}
	}
	writeJSON(w, protocol.StatusOf(e.Code), protocol.ErrorResponse{Error: protocol.Error{Code: e.Code, Message: e.Message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
