// Package tenancy decides whether a source may publish through the
// BackendProvider it names: the platform team's side of the API. It is
// pure: the controller reads the provider and the namespace, and asks.
package tenancy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// Refusal says why a source may not use a provider, and how to fix it.
type Refusal struct {
	// Provider is the BackendProvider named, "" for a source naming none.
	Provider string
	// Rule is the rule that refused, one of the Rule constants: status and
	// events name it after the message.
	Rule string
	// Message names the field, the provider and the fix.
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// The rules a refusal names.
const (
	RuleProviderRequired = "ProviderRequired"
	RuleProviderNotFound = "ProviderNotFound"
	RuleKind             = "Kind"
	RuleNamespace        = "Namespace"
)

// Namespace is what admission reads of a namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Unreferenced decides for a source that names no provider: it uses the
// controller's own connection (its flags), which only an install that
// allows it (allowUnreferenced) lets a namespace do.
func Unreferenced(src v1alpha1.Source, allowUnreferenced bool) *Refusal {
	if allowUnreferenced {
		return nil
	}
	return &Refusal{Rule: RuleProviderRequired, Message: fmt.Sprintf(
		"spec.sources[%s].providerRef: required; this controller publishes only through a BackendProvider that the platform team admitted this namespace to (kubectl get backendproviders)",
		src.Name)}
}

// Admit decides whether src, in namespace ns, may publish through p (nil:
// the BackendProvider src names does not exist), by the rules every kind
// has and then those of src's row in kinds. The checks need no call to the
// provider: a refused source costs the backend nothing.
func Admit(kinds providers.Kinds, p *v1alpha1.BackendProvider, ns Namespace, src v1alpha1.Source) *Refusal {
	name := src.ProviderRef.Name
	field := fmt.Sprintf("spec.sources[%s]", src.Name)
	if p == nil {
		return &Refusal{Provider: name, Rule: RuleProviderNotFound, Message: fmt.Sprintf(
			"%s.providerRef: BackendProvider %q does not exist; ask the platform team which providers this namespace may use (kubectl get backendproviders)", field, name)}
	}
	row, kind := kinds.Of(src), kinds.ProviderOf(p.Spec)
	if row == nil || kind == nil || kind.Name != row.Provider.Name {
		return &Refusal{Provider: name, Rule: RuleKind, Message: fmt.Sprintf(
			"%s.providerRef: BackendProvider %q is of kind %s and cannot serve %s sources; name a BackendProvider of kind %s",
			field, name, kinds.ProviderKindOf(p), kinds.KindOf(src), servedBy(row))}
	}
	if ok, err := NamespaceAdmitted(p.Spec.Namespaces, ns); err != nil {
		return &Refusal{Provider: name, Rule: RuleNamespace, Message: fmt.Sprintf(
			"%s.providerRef: BackendProvider %q has an invalid spec.namespaces.selector (%v); the platform team must fix it", field, name, err)}
	} else if !ok {
		return &Refusal{Provider: name, Rule: RuleNamespace, Message: fmt.Sprintf(
			"%s.providerRef: namespace %s is not admitted to BackendProvider %q (its spec.namespaces lists neither the namespace nor a selector its labels match); ask the platform team to admit it",
			field, ns.Name, name)}
	}
	if row.Admit == nil {
		return nil
	}
	if d := row.Admit(p, src); d != nil {
		return &Refusal{Provider: name, Rule: d.Rule, Message: d.Message}
	}
	return nil
}

// servedBy names the provider kind that serves sources of row, "" for a
// source no row claims (admission makes that impossible).
func servedBy(row *providers.SourceKind) string {
	if row == nil {
		return ""
	}
	return row.Provider.Name
}

// NamespaceAdmitted tells whether sel admits ns: by name, or by labels.
func NamespaceAdmitted(sel v1alpha1.NamespaceSelection, ns Namespace) (bool, error) {
	if slices.Contains(sel.Names, ns.Name) {
		return true, nil
	}
	if sel.Selector == nil {
		return false, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel.Selector)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(ns.Labels)), nil
}

// AllowedPrefixes are the networks p lets endpoints be in, and whether it
// restricts them at all (allowedCIDRs set). An entry that does not parse
// (admission lets none through) is left out, which narrows, never widens.
func AllowedPrefixes(p *v1alpha1.BackendProvider) ([]netip.Prefix, bool) {
	if len(p.Spec.AllowedCIDRs) == 0 {
		return nil, false
	}
	out := make([]netip.Prefix, 0, len(p.Spec.AllowedCIDRs))
	for _, c := range p.Spec.AllowedCIDRs {
		if pr, err := netip.ParsePrefix(strings.TrimSpace(c)); err == nil {
			out = append(out, pr.Masked())
		}
	}
	return out, true
}
