// Package validate checks ExternalBackends and BackendProviders offline, as
// `backendslice validate` does in a pull request: the API server's own
// admission (internal/admission, with the CRDs this binary embeds), the
// controller's own spec checks that end in InvalidSpec, whether each
// source would be admitted to its BackendProvider (internal/tenancy), and
// the addresses the deny list would drop. Each finding names the file, the
// line and the field.
package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/config/crd"
	"github.com/backendslice/backendslice/internal/admission"
	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/internal/speccheck"
	"github.com/backendslice/backendslice/internal/tenancy"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/static"
)

// Severity says whether a finding fails the check.
type Severity string

// The severities of findings.
const (
	// Error: the API server would refuse the object, or the controller
	// would not publish it (InvalidSpec, ProviderNotAdmitted).
	Error Severity = "error"
	// Warning: accepted, but something is lost or deprecated (an address
	// dropped, a deprecated field); fails only with --strict.
	Warning Severity = "warning"
	// Note: something validate could not check offline.
	Note Severity = "note"
)

// The checks a finding comes from.
const (
	CheckInput      = "input"      // the document could not be read
	CheckAdmission  = "admission"  // the API server's schema, defaults and CEL rules
	CheckController = "controller" // the controller's own checks (InvalidSpec)
	CheckTenancy    = "tenancy"    // BackendProvider admission (ProviderNotAdmitted)
	CheckDropped    = "dropped"    // an address the controller would drop
	CheckDeprecated = "deprecated" // a deprecated version, field or value
)

// Finding is one thing validate found about one object.
type Finding struct {
	File string `json:"file"`
	// Line is the line of the object's document in File.
	Line int `json:"line"`
	// FieldLine is the line of Field in File, where the document holds
	// it (else that of the nearest enclosing field it holds).
	FieldLine int    `json:"fieldLine,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Field is the field path, as the API server or the controller names it.
	Field    string   `json:"field,omitempty"`
	Severity Severity `json:"severity"`
	Check    string   `json:"check"`
	// Reason is the Kubernetes reason: the API server's (Invalid,
	// BadRequest) or the condition reason the controller would set.
	Reason string `json:"reason,omitempty"`
	// Rule is the tenancy rule that refused a source.
	Rule    string `json:"rule,omitempty"`
	Message string `json:"message"`
}

// Report is what validate found in a set of documents.
type Report struct {
	Findings []Finding `json:"findings"`
	// Checked counts the ExternalBackends and BackendProviders checked.
	Checked int `json:"checked"`
	// Skipped counts the other objects, by apiVersion and kind.
	Skipped map[string]int `json:"skipped,omitempty"`
}

// Count is how many findings have severity s.
func (r Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// Options are what validate cannot read from its input.
type Options struct {
	// Namespace is where namespaced objects that name none go (Argo CD's
	// destination namespace, kubectl's -n).
	Namespace string
	// NamespaceLabels are the labels of namespaces the input does not
	// hold, for BackendProviders that admit namespaces by selector.
	NamespaceLabels map[string]map[string]string
	// Decision is the controller's configuration the decision reads, from
	// its flags: the deny lists, the cluster domain.
	Decision decide.Config
	// AllowSourcesWithoutProvider is the controller's
	// --allow-sources-without-provider: whether sources may name no provider.
	AllowSourcesWithoutProvider bool
	// ServiceCIDRs are the cluster's Service ranges, which the controller
	// reads from the cluster: addresses there are dropped.
	ServiceCIDRs []netip.Prefix
	// Kinds is the controller's table of source kinds.
	Kinds providers.Kinds
}

// Validator checks documents. Building it compiles the CRDs' rules once.
type Validator struct {
	admission *admission.Checker
	checks    speccheck.Checker
	kinds     providers.Kinds
	opts      Options
}

// New builds a Validator of the CRDs this binary embeds.
func New(opts Options) (*Validator, error) {
	c, err := admission.New(crd.ExternalBackendYAML, crd.BackendProviderYAML)
	if err != nil {
		return nil, err
	}
	return &Validator{admission: c, checks: speccheck.New(), kinds: opts.Kinds, opts: opts}, nil
}

// Kinds the validator checks.
var (
	backendKind  = v1alpha1.GroupVersion.WithKind("ExternalBackend").GroupKind()
	providerKind = v1alpha1.GroupVersion.WithKind("BackendProvider").GroupKind()
)

// Admit runs the API server's admission of a create of d: the object as it
// would be stored, or the refusal. Render reads its ExternalBackends
// through it, so that it renders nothing the API server would refuse.
func (v *Validator) Admit(ctx context.Context, d Document) admission.Result {
	return v.admission.Create(ctx, d.JSON, v.opts.Namespace)
}

// object is a document validate checks, once admitted.
type object struct {
	doc Document
	gk  schema.GroupKind
	res admission.Result
}

// Validate checks every document; the order of findings is the order of
// the documents.
func (v *Validator) Validate(ctx context.Context, docs []Document) Report {
	rep := Report{Skipped: map[string]int{}}
	var objs []object
	in := inventory{namespaces: map[string]map[string]string{}, providers: map[string]*v1alpha1.BackendProvider{}}
	for name, labels := range v.opts.NamespaceLabels {
		in.namespaces[name] = labels
	}
	for _, d := range docs {
		if d.Err != nil {
			rep.Findings = append(rep.Findings, Finding{File: d.File, Line: d.Line, Severity: Error, Check: CheckInput,
				Message: "not a YAML document: " + d.Err.Error()})
			continue
		}
		gvk := d.Kind()
		switch {
		case gvk.GroupKind() == backendKind || gvk.GroupKind() == providerKind:
			o := object{doc: d, gk: gvk.GroupKind(), res: v.Admit(ctx, d)}
			objs = append(objs, o)
			in.add(o)
		case gvk == schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}:
			in.addNamespace(d)
			rep.Skipped["v1 Namespace"]++
		default:
			apiVersion, kind := gvk.ToAPIVersionAndKind()
			rep.Skipped[strings.TrimSpace(apiVersion+" "+kind)]++
		}
	}
	for _, o := range objs {
		rep.Checked++
		rep.Findings = append(rep.Findings, v.check(o, in)...)
	}
	return rep
}

// inventory is what the input holds that tenancy reads: namespaces' labels
// and BackendProviders, by name.
type inventory struct {
	namespaces map[string]map[string]string
	providers  map[string]*v1alpha1.BackendProvider
}

// add records an admitted BackendProvider.
func (in inventory) add(o object) {
	if o.gk != providerKind || o.res.Err != nil {
		return
	}
	bp := &v1alpha1.BackendProvider{}
	if err := fromUnstructured(o.res.Object, bp); err == nil {
		in.providers[bp.Name] = bp
	}
}

// addNamespace records a Namespace's labels.
func (in inventory) addNamespace(d Document) {
	var ns struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(d.JSON, &ns); err == nil && ns.Metadata.Name != "" {
		in.namespaces[ns.Metadata.Name] = ns.Metadata.Labels
	}
}

// fromUnstructured decodes an admitted object into its Go type.
func fromUnstructured(u *unstructured.Unstructured, into any) error {
	js, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(js, into)
}

// check runs every check of one object.
func (v *Validator) check(o object, in inventory) []Finding {
	at := func(f Finding) Finding {
		f.File, f.Line, f.Kind = o.doc.File, o.doc.Line, o.gk.Kind
		if o.res.Object != nil {
			f.Namespace, f.Name = o.res.Object.GetNamespace(), o.res.Object.GetName()
		}
		if f.Field != "" {
			f.FieldLine = o.doc.FieldLine(f.Field)
		}
		return f
	}
	var out []Finding
	for _, f := range admissionFindings(o.res) {
		out = append(out, at(f))
	}
	if o.res.Err != nil || o.gk != backendKind {
		return out
	}
	xb := &v1alpha1.ExternalBackend{}
	if err := fromUnstructured(o.res.Object, xb); err != nil {
		return append(out, at(Finding{Severity: Error, Check: CheckInput, Message: err.Error()}))
	}
	for _, f := range v.backendFindings(xb, in) {
		out = append(out, at(f))
	}
	return out
}

// admissionFindings are the API server's refusal and warnings: one
// finding per cause, with the cause's field and message as kubectl prints
// them.
func admissionFindings(res admission.Result) []Finding {
	var out []Finding
	if res.Err != nil {
		reason := string(apierrors.ReasonForError(res.Err))
		switch causes := res.Causes(); {
		case len(causes) > 0:
			for _, c := range causes {
				out = append(out, Finding{Field: c.Field, Severity: Error, Check: CheckAdmission, Reason: reason, Message: c.Message})
			}
		case len(res.Unknown) > 0:
			// One finding per field, each with its line; the message is
			// the API server's for that field alone.
			for _, f := range res.Unknown {
				out = append(out, Finding{Field: f, Severity: Error, Check: CheckAdmission, Reason: reason, Message: res.UnknownFieldMessage(f)})
			}
		default:
			out = append(out, Finding{Severity: Error, Check: CheckAdmission, Reason: reason, Message: res.Err.Error()})
		}
	}
	for _, w := range res.Warnings {
		out = append(out, Finding{Field: w.Field, Severity: Warning, Check: CheckDeprecated, Message: w.Message})
	}
	return out
}

// backendFindings are the checks of an admitted ExternalBackend that the
// API server does not make.
func (v *Validator) backendFindings(xb *v1alpha1.ExternalBackend, in inventory) []Finding {
	var out []Finding
	problems, err := v.checks.Problems(v.kinds, v.opts.Decision.ClusterDomain, xb)
	if err != nil {
		return []Finding{{Severity: Error, Check: CheckController, Message: err.Error()}}
	}
	for _, p := range problems {
		out = append(out, Finding{Field: fieldOf(p, xb), Severity: Error, Check: CheckController, Reason: v1alpha1.ReasonInvalidSpec, Message: p})
	}
	if slices.Contains(xb.Spec.AddressTypes, v1alpha1.AddressTypeFQDN) {
		out = append(out, Finding{Field: "spec.addressTypes", Severity: Warning, Check: CheckDeprecated,
			Message: "spec.addressTypes: FQDN EndpointSlices are deprecated by Kubernetes (the API server warns on every write of one) and kube-proxy ignores them; publish addresses unless a consumer reads FQDN slices"})
	}
	admitted := make([]*v1alpha1.BackendProvider, len(xb.Spec.Sources))
	for i, src := range xb.Spec.Sources {
		f, bp := v.tenancy(xb, i, src, in)
		out = append(out, f...)
		admitted[i] = bp
	}
	if len(problems) == 0 && !xb.Spec.Suspend {
		out = append(out, v.dropped(xb, admitted)...)
	}
	return out
}

// tenancy decides whether source i of xb would be admitted to its
// BackendProvider, with internal/tenancy's rules, from the providers and
// namespaces of the input (and --namespace-labels); it returns the
// provider when it admits the source.
func (v *Validator) tenancy(xb *v1alpha1.ExternalBackend, i int, src v1alpha1.Source, in inventory) ([]Finding, *v1alpha1.BackendProvider) {
	field := fmt.Sprintf("spec.sources[%d].providerRef", i)
	refused := func(r *tenancy.Refusal) []Finding {
		return []Finding{{Field: field, Severity: Error, Check: CheckTenancy, Reason: v1alpha1.ReasonProviderNotAdmitted, Rule: r.Rule, Message: r.Message}}
	}
	notChecked := func(why string) []Finding {
		return []Finding{{Field: field, Severity: Note, Check: CheckTenancy, Message: fmt.Sprintf("spec.sources[%s]: tenancy not checked: %s", src.Name, why)}}
	}
	if src.ProviderRef == nil {
		if r := tenancy.Unreferenced(src, v.opts.AllowSourcesWithoutProvider); r != nil {
			return refused(r), nil
		}
		return nil, nil
	}
	name := src.ProviderRef.Name
	bp, ok := in.providers[name]
	if !ok {
		return notChecked(fmt.Sprintf("BackendProvider %q is not in the input; add the platform team's BackendProviders to check it", name)), nil
	}
	labels, known := in.namespaces[xb.Namespace]
	r := tenancy.Admit(v.kinds, bp, tenancy.Namespace{Name: xb.Namespace, Labels: labels}, src)
	switch {
	case r == nil:
		return nil, bp
	case r.Rule == tenancy.RuleNamespace && !known && bp.Spec.Namespaces.Selector != nil:
		return notChecked(fmt.Sprintf("BackendProvider %q admits namespaces by labels, and the labels of namespace %s are not known; add the Namespace to the input or pass --namespace-labels", name, xb.Namespace)), nil
	default:
		return refused(r), nil
	}
}

// dropped are the static addresses the controller would drop (the deny
// list, spec.addressTypes, a provider's allowedCIDRs, the Service ranges
// given), found by the controller's own decision; admitted are
// the providers of its sources, nil for those without one. Other kinds of
// source are not resolved offline.
func (v *Validator) dropped(xb *v1alpha1.ExternalBackend, admitted []*v1alpha1.BackendProvider) []Finding {
	var results []publish.SourceResult
	for i, src := range xb.Spec.Sources {
		if src.Static == nil {
			continue
		}
		res, err := static.New().Resolve(context.Background(), providers.Request{Namespace: xb.Namespace, Backend: xb.Name, Source: src})
		if err != nil {
			return []Finding{{Severity: Error, Check: CheckController, Reason: v1alpha1.ReasonInvalidSpec, Message: err.Error()}}
		}
		r := publish.SourceResult{Name: src.Name, Endpoints: res.Endpoints}
		if bp := admitted[i]; bp != nil {
			r.Allowed, r.Restricted = tenancy.AllowedPrefixes(bp)
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return nil
	}
	var cluster publish.ClusterNetworks
	for _, p := range v.opts.ServiceCIDRs {
		cluster.Ranges = append(cluster.Ranges, publish.ClusterRange{Prefix: p, Of: "a Service range given by --service-cidrs"})
	}
	// The decision's first half drops what the controller would: offline,
	// every family the spec asks for is taken as served.
	candidates := decide.Normalize(decide.Inputs{Backend: xb, Sources: decide.Sources{Results: results},
		Served: sets.New(corev1.IPv4Protocol, corev1.IPv6Protocol), Cluster: cluster, Config: v.opts.Decision})
	var out []Finding
	for _, d := range candidates.Dropped {
		msg := fmt.Sprintf("the controller would drop %s from source %s: %s", d.Address, d.Source, d.Reason)
		// The controller's status does not say whose a cluster address
		// is; here the networks are the ones the flags gave.
		if whose := cluster.Whose(d.Address); whose != "" {
			msg += " (" + whose + ")"
		}
		out = append(out, Finding{Field: addressField(xb, d), Severity: Warning, Check: CheckDropped, Reason: v1alpha1.ReasonAddressesDropped,
			Message: msg})
	}
	return out
}

// addressField is the field of a dropped static address.
func addressField(xb *v1alpha1.ExternalBackend, d v1alpha1.DroppedAddress) string {
	for i, src := range xb.Spec.Sources {
		if src.Name != d.Source || src.Static == nil {
			continue
		}
		for j, e := range src.Static.Endpoints {
			if e.Address == d.Address {
				return fmt.Sprintf("spec.sources[%d].static.endpoints[%d].address", i, j)
			}
		}
		return fmt.Sprintf("spec.sources[%d].static.endpoints", i)
	}
	return "spec.sources"
}

// fieldOf is the field a controller message starts with ("spec.x: ..."),
// with a source named in brackets turned into its index.
func fieldOf(msg string, xb *v1alpha1.ExternalBackend) string {
	field, _, ok := strings.Cut(msg, ": ")
	if !ok || strings.ContainsAny(field, " \"") {
		return ""
	}
	for i, src := range xb.Spec.Sources {
		field = strings.Replace(field, "spec.sources["+src.Name+"]", fmt.Sprintf("spec.sources[%d]", i), 1)
	}
	return field
}
