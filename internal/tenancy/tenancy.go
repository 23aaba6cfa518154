// Package tenancy decides whether a source may publish through the
// BackendProvider it names: the platform team's side of the API. It is
// pure: the controller reads the provider and the namespace, and asks.
package tenancy

import (
	"fmt"
	"net/netip"
	"path"
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
	RuleService          = "AllowedServices"
)

// Namespace is what admission reads of a namespace.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// KindOf is the provider's kind as its spec says: static, dns, consul or
// aws; "" when none is set (admission makes that impossible).
func KindOf(p *v1alpha1.BackendProvider) string {
	switch s := p.Spec; {
	case s.Static != nil:
		return "static"
	case s.DNS != nil:
		return "dns"
	case s.Consul != nil:
		return "consul"
	case s.AWS != nil:
		return "aws"
	}
	return ""
}

// serves tells whether a provider of kind serves sources of kind k.
func serves(kind string, k providers.Kind) bool {
	switch k {
	case providers.KindAWSRDS, providers.KindAWSEC2:
		return kind == "aws"
	}
	return kind == string(k)
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
// the BackendProvider src names does not exist). The checks need no call
// to the provider: a refused source costs the backend nothing.
func Admit(p *v1alpha1.BackendProvider, ns Namespace, src v1alpha1.Source) *Refusal {
	name := src.ProviderRef.Name
	field := fmt.Sprintf("spec.sources[%s]", src.Name)
	if p == nil {
		return &Refusal{Provider: name, Rule: RuleProviderNotFound, Message: fmt.Sprintf(
			"%s.providerRef: BackendProvider %q does not exist; ask the platform team which providers this namespace may use (kubectl get backendproviders)", field, name)}
	}
	kind, srcKind := KindOf(p), providers.KindOf(src)
	if !serves(kind, srcKind) {
		return &Refusal{Provider: name, Rule: RuleKind, Message: fmt.Sprintf(
			"%s.providerRef: BackendProvider %q is of kind %s and cannot serve %s sources; name a BackendProvider of kind %s", field, name, kind, srcKind, kindFor(srcKind))}
	}
	if ok, err := NamespaceAdmitted(p.Spec.Namespaces, ns); err != nil {
		return &Refusal{Provider: name, Rule: RuleNamespace, Message: fmt.Sprintf(
			"%s.providerRef: BackendProvider %q has an invalid spec.namespaces.selector (%v); the platform team must fix it", field, name, err)}
	} else if !ok {
		return &Refusal{Provider: name, Rule: RuleNamespace, Message: fmt.Sprintf(
			"%s.providerRef: namespace %s is not admitted to BackendProvider %q (its spec.namespaces lists neither the namespace nor a selector its labels match); ask the platform team to admit it",
			field, ns.Name, name)}
	}
	if c := p.Spec.Consul; c != nil && src.Consul != nil && !ServiceAllowed(c.AllowedServices, src.Consul.Service) {
		return &Refusal{Provider: name, Rule: RuleService, Message: fmt.Sprintf(
			"%s.consul.service: %q is not among the services BackendProvider %q serves (spec.consul.allowedServices %v)",
			field, src.Consul.Service, name, c.AllowedServices)}
	}
	return nil
}

// kindFor is the provider kind that serves a source kind.
func kindFor(k providers.Kind) string {
	if k == providers.KindAWSRDS || k == providers.KindAWSEC2 {
		return "aws"
	}
	return string(k)
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

// ServiceAllowed tells whether a Consul service matches one of the globs
// (path.Match syntax: * and ?); no globs allow every service.
func ServiceAllowed(globs []string, service string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		// A glob admission let through is well formed; a malformed one
		// matches nothing.
		if ok, _ := path.Match(g, service); ok {
			return true
		}
	}
	return false
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
