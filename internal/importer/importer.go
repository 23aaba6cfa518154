// Package importer turns what teams publish by hand, selectorless Services
// with hand-written EndpointSlices, legacy Endpoints objects (which
// kube-controller-manager mirrors into slices) and ExternalName Services,
// into ExternalBackends that publish the same thing, and names everything
// that cannot be carried over. It is pure: `backendslice import` reads the
// objects, from files or a live namespace, and writes what it returns.
package importer

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Options change what an import writes.
type Options struct {
	// Namespace is the namespace of input objects that name none (Argo CD's
	// destination namespace); "default" when empty. The ExternalBackends
	// of such objects name none either.
	Namespace string
	// Adopt asks the controller to take over each imported Service
	// (spec.service.adopt) instead of refusing it as not its own, where it
	// would.
	Adopt bool
	// StaticProvider and DNSProvider are the BackendProviders the imported
	// static and dns sources name (providerRef); none when empty.
	StaticProvider, DNSProvider string
}

// Backend is one imported ExternalBackend and what the import says of it.
type Backend struct {
	ExternalBackend *v1alpha1.ExternalBackend
	// Namespace is the backend's namespace, Options.Namespace where its
	// Service names none.
	Namespace string
	// Replaces names the objects it was imported from.
	Replaces []string
	// Notes say what was left out or changed, and why.
	Notes []Note
}

// Result is what an import made of its input.
type Result struct {
	// Backends are the ExternalBackends, by namespace and name.
	Backends []Backend
	// Refused are the notes on Services not imported and objects not read.
	Refused []Note
}

// key names a Service, and the slices and Endpoints that belong to it.
type key struct{ namespace, name string }

// owned are the objects that belong to one Service.
type owned struct {
	slices    []*discoveryv1.EndpointSlice
	endpoints *corev1.Endpoints
}

// Convert imports objs: one Backend for each selectorless or ExternalName
// Service, and a note for every other Service and for each slice or
// Endpoints object that belongs to no Service of the input.
func Convert(objs Objects, opt Options) Result {
	if opt.Namespace == "" {
		opt.Namespace = metav1.NamespaceDefault
	}
	res := Result{Refused: slices.Clone(objs.Notes)}
	services, byService, stray := index(objs, opt.Namespace)
	res.Refused = append(res.Refused, stray...)
	for _, k := range sortedKeys(services) {
		b, refused := convertService(services[k], byService[k], opt, k.namespace)
		if b != nil {
			res.Backends = append(res.Backends, *b)
		}
		res.Refused = append(res.Refused, refused...)
		delete(byService, k)
	}
	for _, k := range sortedKeys(byService) {
		for _, s := range byService[k].slices {
			res.Refused = append(res.Refused, Note{Kind: Refused, Object: name("EndpointSlice", s.Namespace, s.Name),
				Text: "its kubernetes.io/service-name label names Service " + k.name + ", which is not in the input: not read"})
		}
		if ep := byService[k].endpoints; ep != nil {
			res.Refused = append(res.Refused, Note{Kind: Refused, Object: name("Endpoints", ep.Namespace, ep.Name),
				Text: "no Service of its name is in the input: not read"})
		}
	}
	return res
}

// index sorts the objects by the Service they belong to: a slice by its
// kubernetes.io/service-name label, an Endpoints object by its name.
// Objects without a namespace are in ns. Slices without the label belong
// to none, and the same object twice is read once: both are noted.
func index(objs Objects, ns string) (map[key]*corev1.Service, map[key]*owned, []Note) {
	var notes []Note
	nsOf := func(m metav1.ObjectMeta) string { return cmp.Or(m.Namespace, ns) }
	services := map[key]*corev1.Service{}
	for i := range objs.Services {
		s := &objs.Services[i]
		k := key{nsOf(s.ObjectMeta), s.Name}
		if _, dup := services[k]; dup {
			notes = append(notes, duplicate("Service", s.ObjectMeta))
			continue
		}
		services[k] = s
	}
	byService := map[key]*owned{}
	of := func(k key) *owned {
		if byService[k] == nil {
			byService[k] = &owned{}
		}
		return byService[k]
	}
	seen := map[key]bool{}
	for i := range objs.Slices {
		s := &objs.Slices[i]
		svc, labelled := s.Labels[discoveryv1.LabelServiceName]
		switch {
		case seen[key{nsOf(s.ObjectMeta), s.Name}]:
			notes = append(notes, duplicate("EndpointSlice", s.ObjectMeta))
		case !labelled || svc == "":
			notes = append(notes, Note{Kind: Refused, Object: name("EndpointSlice", s.Namespace, s.Name),
				Text: "no kubernetes.io/service-name label, so no Service reads it (kube-proxy ignores it): not read; label it with its Service's name and import again if it was meant to publish"})
		default:
			of(key{nsOf(s.ObjectMeta), svc}).slices = append(of(key{nsOf(s.ObjectMeta), svc}).slices, s)
		}
		seen[key{nsOf(s.ObjectMeta), s.Name}] = true
	}
	for i := range objs.Endpoints {
		e := &objs.Endpoints[i]
		o := of(key{nsOf(e.ObjectMeta), e.Name})
		if o.endpoints != nil {
			notes = append(notes, duplicate("Endpoints", e.ObjectMeta))
			continue
		}
		o.endpoints = e
	}
	return services, byService, notes
}

// duplicate notes an object read twice.
func duplicate(kind string, m metav1.ObjectMeta) Note {
	return Note{Kind: Refused, Object: name(kind, m.Namespace, m.Name),
		Text: "appears twice in the input: the first is read"}
}

// sortedKeys are the keys of m by namespace and name.
func sortedKeys[V any](m map[key]V) []key {
	keys := make([]key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	return keys
}

// convertService imports one Service, or refuses it with the reason.
func convertService(svc *corev1.Service, in *owned, opt Options, ns string) (*Backend, []Note) {
	if in == nil {
		in = &owned{}
	}
	obj := name("Service", svc.Namespace, svc.Name)
	refuse := func(text string) []Note { return []Note{{Kind: Refused, Object: obj, Text: text}} }
	switch {
	case len(svc.Spec.Selector) > 0:
		return nil, refuse("has a selector: Kubernetes writes its endpoints from the Pods it selects, so it is not a candidate; its EndpointSlices and Endpoints are not read")
	case ns == metav1.NamespaceDefault && svc.Name == "kubernetes":
		return nil, refuse("the API server's own Service: not a candidate")
	case ownedByBackend(svc):
		return nil, refuse("already published by backendslice (it belongs to an ExternalBackend): not a candidate")
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return externalName(svc, in, opt, ns)
	}
	return selectorless(svc, in, opt, ns)
}

// ownedByBackend reports whether an ExternalBackend owns svc or its
// label names one.
func ownedByBackend(svc *corev1.Service) bool {
	if _, ok := svc.Labels[v1alpha1.BackendLabel]; ok {
		return true
	}
	return slices.ContainsFunc(svc.OwnerReferences, func(r metav1.OwnerReference) bool {
		return r.Kind == "ExternalBackend" && r.APIVersion == v1alpha1.GroupVersion.String()
	})
}

// newBackend is the ExternalBackend of svc's name and namespace, without
// its spec, and the Backend around it.
func newBackend(svc *corev1.Service, ns string) *Backend {
	xb := &v1alpha1.ExternalBackend{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace}}
	xb.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ExternalBackend"))
	return &Backend{
		ExternalBackend: xb,
		Namespace:       ns,
		Replaces:        []string{name("Service", svc.Namespace, svc.Name)},
	}
}

// providerRef names provider, or is nil for "".
func providerRef(provider string) *v1alpha1.ProviderReference {
	if provider == "" {
		return nil
	}
	return &v1alpha1.ProviderReference{Name: provider}
}
