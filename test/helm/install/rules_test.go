package install

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// need is how a test shows that a request the chart grants is needed: the
// controller, denied that one request, runs a scenario that makes it.
type need struct {
	scenario *scenario
	// env adds to the controller's environment.
	env []string
	// act makes the request, once the scenario has begun, where the
	// scenario alone does not (a scrape of the metrics); nil for none.
	act func(t *testing.T, r *refusedRun)
	// shows checks, once the request has been refused, what the refusal did
	// to the scenario; nil when the refusal is all there is to see.
	shows func(t *testing.T, r *refusedRun)
}

// refusedRun is a scenario run by a controller denied one request.
type refusedRun struct {
	req            request
	xb             *v1alpha1.ExternalBackend
	leaseNamespace string
	controller     *controllerProcess
	// scraped is the status of act's scrape of the metrics, and its body.
	scraped     int
	scrapedBody string
}

// xbGroup is the API group of ExternalBackends.
var xbGroup = v1alpha1.GroupVersion.Group

// noWatchList turns off client-go's streaming lists, with which informers
// start from a watch: they then start from a list, as against API servers
// older than 1.32 or with the WatchList feature off.
const noWatchList = "KUBE_FEATURE_WatchListClient=false"

// needs says, for each request the chart grants, how a test shows it is
// needed. A refused watch shows nothing more than the refusal: informers
// then relist after a back-off, so the controller still converges, but
// learns of changes (drift, edits) late and loads the API server with
// lists; no test can show "late" without timing it.
var needs = map[request]need{
	{"create", "", "services"}:                       {scenario: &core, shows: writeFailed},
	{"get", "", "services"}:                          {scenario: &foreignService, shows: readFailed},
	{"update", "", "services"}:                       {scenario: &portChange, shows: writeFailed},
	{"delete", "", "services"}:                       {scenario: &toHeadless, shows: writeFailed},
	{"list", "", "services"}:                         {scenario: &core, env: []string{noWatchList}, shows: neverReconciled},
	{"watch", "", "services"}:                        {scenario: &core},
	{"list", xbGroup, "externalbackends"}:            {scenario: &core, env: []string{noWatchList}, shows: neverReconciled},
	{"watch", xbGroup, "externalbackends"}:           {scenario: &core},
	{"patch", xbGroup, "externalbackends/status"}:    {scenario: &core, shows: statusNotWritten},
	{"create", "discovery.k8s.io", "endpointslices"}: {scenario: &core, shows: writeFailed},
	{"get", "discovery.k8s.io", "endpointslices"}:    {scenario: &foreignSlice, shows: readFailed},
	{"update", "discovery.k8s.io", "endpointslices"}: {scenario: &unhealthy, shows: writeFailed},
	{"delete", "discovery.k8s.io", "endpointslices"}: {scenario: &shrink, shows: writeFailed},
	{"list", "discovery.k8s.io", "endpointslices"}:   {scenario: &core, env: []string{noWatchList}, shows: neverReconciled},
	{"watch", "discovery.k8s.io", "endpointslices"}:  {scenario: &core},
	{"list", "networking.k8s.io", "servicecidrs"}:    {scenario: &core, env: []string{noWatchList}, shows: neverReconciled},
	{"watch", "networking.k8s.io", "servicecidrs"}:   {scenario: &core},
	{"create", "events.k8s.io", "events"}:            {scenario: &driftTwice, shows: noEvents},
	{"patch", "events.k8s.io", "events"}:             {scenario: &driftTwice, shows: noSeries},
	{"get", "coordination.k8s.io", "leases"}:         {scenario: &core, shows: neverReconciled},
	{"create", "coordination.k8s.io", "leases"}:      {scenario: &core, shows: neverReconciled},
	{"update", "coordination.k8s.io", "leases"}:      {scenario: &core, shows: leadershipLost},
	{"create", "", "events"}:                         {scenario: &core, shows: noLeaderElectionEvent},
	// Tenancy: BackendProviders and the namespaces they admit, read from
	// the cache, and the providers' status.
	{"list", xbGroup, "backendproviders"}:         {scenario: &throughProvider, env: []string{noWatchList}, shows: neverReconciledNorReported},
	{"watch", xbGroup, "backendproviders"}:        {scenario: &throughProvider},
	{"patch", xbGroup, "backendproviders/status"}: {scenario: &throughProvider, shows: providerStatusNotWritten},
	{"list", "", "namespaces"}:                    {scenario: &admittedByLabel, env: []string{noWatchList}, shows: neverReconciled},
	{"watch", "", "namespaces"}:                   {scenario: &admittedByLabel},
	// The Secrets BackendProviders name, in the controller's namespace
	// alone (the chart's -secrets Role): its cache lists and watches them,
	// and never gets one, so get is not granted.
	{"list", "", "secrets"}:  {scenario: &providerSecret, env: []string{noWatchList}, shows: neverReconciledNorReported},
	{"watch", "", "secrets"}: {scenario: &providerSecret},
	// Adoption retires a hand-written Service's legacy Endpoints object.
	{"get", "", "endpoints"}:    {scenario: &adoptLegacy, shows: readFailed},
	{"delete", "", "endpoints"}: {scenario: &adoptLegacy, shows: writeFailed},
	// The Nodes: their addresses are always denied, their Pod ranges
	// with --deny-pod-cidrs (on by default, and in the child).
	{"list", "", "nodes"}:  {scenario: &podRange, env: []string{noWatchList}, shows: neverReconciled},
	{"watch", "", "nodes"}: {scenario: &podRange},
	// The metrics endpoint asks the API server who scrapes, and whether
	// they may.
	{"create", "authentication.k8s.io", "tokenreviews"}:        {scenario: &core, act: scrapeAsReader, shows: scrapeFailed},
	{"create", "authorization.k8s.io", "subjectaccessreviews"}: {scenario: &core, act: scrapeAsReader, shows: scrapeFailed},
}

// unexercised are requests the chart grants, because the controller's RBAC
// markers ask for them, that no scenario here makes; each says why.
var unexercised = map[request]string{
	{"update", xbGroup, "externalbackends/finalizers"}: "only the OwnerReferencesPermissionEnforcement admission plugin checks it " +
		"(for the Service's blockOwnerDeletion owner reference to its ExternalBackend), and the test API server does not enable it",
	{"update", "", "services/finalizers"}: "only the OwnerReferencesPermissionEnforcement admission plugin checks it " +
		"(for the slices' blockOwnerDeletion owner reference to their Service), and the test API server does not enable it",
}

// TestEachRuleIsNeeded takes each request the chart grants away in turn and
// shows a scenario the controller then cannot complete: the API server
// refuses the request, with the consequence each case names. The requests no
// scenario makes are taken away together, and every scenario still passes.
func TestEachRuleIsNeeded(t *testing.T) {
	cluster, namespaced := chartRules(t)
	granted := append(requests(cluster), requests(namespaced)...)
	slices.SortFunc(granted, func(a, b request) int { return strings.Compare(a.String(), b.String()) })
	for req := range needs {
		if !slices.Contains(granted, req) {
			t.Errorf("needs lists %s, which the chart does not grant", req)
		}
	}
	for req := range unexercised {
		if !slices.Contains(granted, req) {
			t.Errorf("unexercised lists %s, which the chart does not grant", req)
		}
	}
	for _, req := range granted {
		n, ok := needs[req]
		if !ok {
			if _, ok := unexercised[req]; !ok {
				t.Errorf("the chart grants %s, and no test shows it is needed nor says why not", req)
			}
			continue
		}
		t.Run("without "+subtestName(req), func(t *testing.T) {
			ns := framework.Namespace(t)
			drop := func(r request) bool { return r == req }
			id := grant(t, ns, without(cluster, drop), without(namespaced, drop))
			p := startController(t, id, ns, n.env...)
			r := &refusedRun{req: req, leaseNamespace: ns, controller: p, xb: n.scenario.begin(t, ns, ns)}
			if n.act != nil {
				n.act(t, r)
			}
			p.waitRefused(t, req)
			if n.shows != nil {
				n.shows(t, r)
			}
		})
	}
	t.Run("without the requests no scenario makes", func(t *testing.T) {
		ns := framework.Namespace(t)
		drop := func(r request) bool { _, ok := unexercised[r]; return ok }
		id := grant(t, ns, without(cluster, drop), without(namespaced, drop))
		p := startController(t, id, ns)
		runScenarios(t, ns)
		for _, r := range p.refusals() {
			t.Errorf("refused %s (%s)", r, unexercised[r])
		}
	})
}

// scrapeAsReader scrapes the controller's metrics with the token of a
// ServiceAccount bound to a ClusterRole of the metrics reader's rule, once
// the endpoint answers at all.
func scrapeAsReader(t *testing.T, r *refusedRun) {
	t.Helper()
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.leaseNamespace + "-metrics-reader"}, Rules: []rbacv1.PolicyRule{metricsReaderRule}}
	framework.Create(t, reader)
	token := scraperToken(t, r.leaseNamespace, "prometheus", reader.Name)
	framework.Eventually(t, framework.Timeout, "the metrics endpoint answering", func() error {
		var err error
		r.scraped, r.scrapedBody, err = scrape(r.controller.metrics, token)
		return err
	})
}

// scrapeFailed shows a scrape with a token the metrics reader is bound to
// failing (500, no metrics): the controller could not ask the API server.
func scrapeFailed(t *testing.T, r *refusedRun) {
	t.Helper()
	if r.scraped != http.StatusInternalServerError || strings.Contains(r.scrapedBody, "backendslice_") {
		t.Errorf("a reader's scrape answered %d %q, want 500 and no metrics", r.scraped, r.scrapedBody)
	}
}

// subtestName names a request in a form that also makes a namespace name.
func subtestName(r request) string {
	group := r.group
	if group == "" {
		group = "core"
	}
	return strings.NewReplacer("/", "-", ".", "-").Replace(r.verb + "-" + r.resource + "-" + group)
}

// writeFailed shows the backend failing, for its current generation, with
// the API server's refusal in its Ready condition.
func writeFailed(t *testing.T, r *refusedRun) { refusedAs(t, r, v1alpha1.ReasonWriteFailed) }

// readFailed shows the backend not Ready, its status naming the refused read.
func readFailed(t *testing.T, r *refusedRun) { refusedAs(t, r, v1alpha1.ReasonReadFailed) }

// refusedAs waits until Ready is False with reason, naming the refused request.
func refusedAs(t *testing.T, r *refusedRun, reason string) {
	t.Helper()
	want := fmt.Sprintf("cannot %s resource %q", r.req.verb, r.req.resource)
	framework.Eventually(t, framework.Timeout, "Ready=False naming the refusal", func() error {
		cur := framework.Get(t, r.xb)
		c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason ||
			c.ObservedGeneration != cur.Generation || !strings.Contains(c.Message, want) {
			return fmt.Errorf("Ready is %+v, want False/%s for generation %d saying %q", c, reason, cur.Generation, want)
		}
		return nil
	})
}

// neverReconciled shows the backend untouched: a controller whose
// informers cannot start, or that never becomes leader, reconciles nothing.
func neverReconciled(t *testing.T, r *refusedRun) {
	t.Helper()
	if cur := framework.Get(t, r.xb); len(cur.Status.Conditions) > 0 {
		t.Errorf("the backend has conditions %v; the controller should not have reconciled it", cur.Status.Conditions)
	}
}

// statusNotWritten shows the Service and slices published but the backend
// without status: users see nothing of what happened.
func statusNotWritten(t *testing.T, r *refusedRun) {
	t.Helper()
	framework.WaitAddresses(t, r.xb.Namespace, backendName, ipv4a, ipv4b, ipv6)
	if cur := framework.Get(t, r.xb); len(cur.Status.Conditions) > 0 {
		t.Errorf("the backend has conditions %v, though status cannot be written", cur.Status.Conditions)
	}
}

// noEvents shows the backend Ready without a single event about it.
func noEvents(t *testing.T, r *refusedRun) {
	t.Helper()
	framework.WaitReady(t, r.xb)
	if evs := events(t, r.xb); len(evs) > 0 {
		t.Errorf("%d events about the backend, though none can be created", len(evs))
	}
}

// noSeries shows the repeated event never counted.
func noSeries(t *testing.T, r *refusedRun) {
	t.Helper()
	for _, e := range events(t, r.xb) {
		if e.Series != nil {
			t.Errorf("event %s has a series %+v, though events cannot be patched", e.Name, e.Series)
		}
	}
}

// leadershipLost shows the controller losing its lease, which it cannot
// renew, and exiting: no replica reconciles until another one leads.
func leadershipLost(t *testing.T, r *refusedRun) {
	t.Helper()
	if err := r.controller.waitExit(t); err == nil {
		t.Error("the controller exited cleanly; want it to fail on losing its lease")
	}
	if out := r.controller.output.String(); !strings.Contains(out, "leader election lost") {
		t.Errorf("the controller's output does not say leader election was lost:\n%s", out)
	}
}

// noLeaderElectionEvent shows the backend Ready, but no event recording
// which replica leads.
func noLeaderElectionEvent(t *testing.T, r *refusedRun) {
	t.Helper()
	framework.WaitReady(t, r.xb)
	if evs := leaderElectionEvents(t, r.leaseNamespace); len(evs) > 0 {
		t.Errorf("%d leader election events, though events cannot be created", len(evs))
	}
}
