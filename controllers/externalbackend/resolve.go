package externalbackend

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/decide"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/providers"
)

// lastAnswer is what a source last said, kept between reconciles so that a
// failing source keeps publishing it.
type lastAnswer struct {
	// spec is a hash of the source's spec when it answered: an answer
	// stands only for the spec that produced it, so a source edited while
	// it fails does not keep publishing its old target.
	spec uint64
	// endpoints are the answer; nil for a gone backend.
	endpoints []providers.Endpoint
	// unknown means the source has failed ever since this controller
	// started: what it published before is only in the slices, mixed with
	// the other sources' endpoints.
	unknown bool
}

// resolved is what the sources said, as the rest of the reconcile uses it.
type resolved struct {
	// results of each source, in spec order; a failing source's result
	// carries its held answer.
	results []publish.SourceResult
	// holdVanished keeps published endpoints that no answer has: a source
	// that has failed since the controller started may own them.
	holdVanished bool
	// unknown names those sources: the slices' record of who published
	// what (publish.SourcesAnnotation) narrows what they hold.
	unknown sets.Set[string]
	// refreshAfter is the earliest time a provider wants to be asked again.
	refreshAfter time.Duration
	// refused names the sources admission refused: what the slices record
	// as theirs leaves at once too, after a restart as before one.
	refused sets.Set[string]
	// withdrawn are the addresses that sources refused by admission
	// published: they leave at once, neither held nor drained.
	withdrawn sets.Set[string]
	// admissions are what admission decided for each source.
	admissions []sourceAdmission
	// limits name the providers' limits that cut an answer short.
	limits []string
	// fates say what became of what each failing source published, by
	// source name, for the status messages.
	fates map[string]fate
}

// sources is what the sources said, as the decision reads it.
func (res resolved) sources() decide.Sources {
	grants := make([]decide.Grant, len(res.admissions))
	for i, adm := range res.admissions {
		grants[i] = decide.Grant{Refused: adm.refused != nil, Restricted: adm.restricted, Allowed: adm.allowed}
	}
	return decide.Sources{Results: res.results, Grants: grants, Unknown: res.unknown, Refused: res.refused, Withdrawn: res.withdrawn}
}

// sourceHash identifies a source's spec. Marshalling a typed struct cannot fail.
func sourceHash(src v1alpha1.Source) uint64 {
	b, _ := json.Marshal(src)
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

// ask resolves every source that admissions let through, at once, and
// returns each source's reply (a refused or unusable one's says why) and
// the admitted sources.
func (r *Reconciler) ask(ctx context.Context, xb *v1alpha1.ExternalBackend, admissions []sourceAdmission) ([]sourceReply, []v1alpha1.Source) {
	replies := make([]sourceReply, len(xb.Spec.Sources))
	var wg sync.WaitGroup
	var admitted []v1alpha1.Source
	for i, src := range xb.Spec.Sources {
		adm := admissions[i]
		switch {
		case adm.refused != nil:
			replies[i].err = providers.Terminalf(v1alpha1.ReasonProviderNotAdmitted, "%s (rule %s)", adm.refused.Message, adm.refused.Rule)
			continue
		case adm.unusable != nil:
			// Held like any failing provider's answer, but its watches
			// go: they would query with a connection that no longer is.
			replies[i].err = providers.Terminalf(v1alpha1.ReasonProviderNotAvailable,
				"spec.sources[%s].providerRef: %v; the platform team must fix the BackendProvider (kubectl get bp %s)", src.Name, adm.unusable, src.ProviderRef.Name)
			continue
		}
		admitted = append(admitted, src)
		wg.Go(func() {
			replies[i] = r.call(ctx, providers.Request{
				Namespace: xb.Namespace, Backend: xb.Name, Source: src, AddressTypes: xb.Spec.AddressTypes, Connection: adm.conn,
				DeniedName: r.deniedName,
			})
		})
	}
	wg.Wait()
	return replies, admitted
}

// call asks the source's provider: through the lookups, so that a slow
// call does not hold the worker, or, without them, within the pass.
func (r *Reconciler) call(ctx context.Context, req providers.Request) sourceReply {
	if r.lookups != nil {
		return r.lookups.ask(ctx, req, sourceHash(req.Source))
	}
	ctx, cancel := context.WithTimeout(ctx, r.Config.ResolveTimeout)
	defer cancel()
	res, err := r.Providers.Resolve(ctx, req)
	return sourceReply{res, err}
}

// forgetSources drops the providers' watches and listings, and the calls
// in flight, of key's sources other than keep.
func (r *Reconciler) forgetSources(key types.NamespacedName, keep ...v1alpha1.Source) {
	r.Providers.Forget(key, keep...)
	if r.lookups != nil {
		r.lookups.forget(key, keep...)
	}
}

// sourceReply is what one source's provider answered.
type sourceReply struct {
	res providers.Result
	err error
}

// hold is the answer a source that fails (its backend not gone) stands
// by, given its last one (ok: there is one): that answer again, published as it was, for
// the same spec; nothing known since the controller started, so what the
// slices publish for it is held; or, for a spec edited while failing,
// nothing, so that the old target's endpoints drain. It records on res
// which it is.
func (res *resolved) hold(last lastAnswer, ok bool, name string, spec uint64, result *publish.SourceResult) lastAnswer {
	res.fates[name] = fateKept
	switch {
	case !ok || (last.unknown && last.spec == spec):
		// Failing since the controller started: hold what the slices
		// publish, for as long as the failure lasts.
		res.holdVanished = true
		res.unknown.Insert(name)
		return lastAnswer{spec: spec, unknown: true}
	case last.spec != spec:
		// Edited while failing: the old target's endpoints drain.
		res.fates[name] = fateEdited
		return lastAnswer{spec: spec}
	}
	result.Endpoints, result.Held = last.endpoints, true
	return last
}

// resolveSources asks every admitted source for its endpoints (admissions come
// from admit), all at once so that slow sources cost the time of the
// slowest, not their sum. A failing source does not stop the others: it
// keeps its last answer for the same spec. A refused source is asked
// nothing, and what it published is withdrawn.
func (r *Reconciler) resolveSources(ctx context.Context, xb *v1alpha1.ExternalBackend, admissions []sourceAdmission) resolved {
	key := client.ObjectKeyFromObject(xb)
	var previous map[string]lastAnswer
	r.state.lookup(key, func(b *backendState) { previous = b.answers })
	replies, admitted := r.ask(ctx, xb, admissions)
	out := resolved{withdrawn: sets.New[string](), unknown: sets.New[string](), refused: sets.New[string](), admissions: admissions,
		fates: map[string]fate{}}
	answers := make(map[string]lastAnswer, len(xb.Spec.Sources))
	for i, src := range xb.Spec.Sources {
		res, err := replies[i].res, replies[i].err
		spec := sourceHash(src)
		result := publish.SourceResult{Name: src.Name, Endpoints: res.Endpoints, Err: err,
			Allowed: admissions[i].allowed, Restricted: admissions[i].restricted}
		if admissions[i].refused != nil {
			// Not held, unlike a failing provider's: the platform team
			// took the access away.
			out.refused.Insert(src.Name)
			out.fates[src.Name] = fateWithdrawn
			for _, e := range previous[src.Name].endpoints {
				out.withdrawn.Insert(publish.CanonicalAddress(e.Address))
			}
			answers[src.Name] = lastAnswer{spec: spec}
			out.results = append(out.results, result)
			continue
		}
		switch {
		case err == nil:
			answers[src.Name] = lastAnswer{spec: spec, endpoints: res.Endpoints}
		case providers.AsError(err).Gone:
			// The backend is gone: what it published drains.
			answers[src.Name] = lastAnswer{spec: spec}
			out.fates[src.Name] = fateDrains
		default:
			last, ok := previous[src.Name]
			answers[src.Name] = out.hold(last, ok, src.Name, spec, &result)
		}
		if res.Limit != "" {
			out.limits = append(out.limits, res.Limit)
		}
		if err == nil || providers.AsError(err).Gone {
			// A gone backend may come back: look again when the provider says.
			out.refreshAfter = earliest(out.refreshAfter, res.RefreshAfter)
		}
		out.results = append(out.results, result)
	}
	r.state.update(key, func(b *backendState) { b.answers = answers })
	// Providers keep watches and listings only for admitted sources.
	r.forgetSources(key, admitted...)
	return out
}

// deniedName says why a source's lookup must not follow name (a CNAME
// target, lower case without its trailing dot), or is "" when it may: the
// checks an FQDN endpoint gets, so that a name outside the cluster cannot
// lead a lookup into the cluster's DNS domain (another namespace's Pods),
// localhost or a metadata service.
func (r *Reconciler) deniedName(name string) string {
	return publish.DeniedNameReason(name, r.Config.DeniedNames, r.Config.ClusterDomain)
}
