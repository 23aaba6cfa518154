// Command controllermanager is the tests' kube-controller-manager: it runs
// the upstream controllers the suites start, each built as
// kube-controller-manager builds it (k8s.io/kubernetes/pkg/controller, the
// same version as kube-apiserver), and takes kube-controller-manager's flags
// for them. The whole kube-controller-manager links in every other
// controller, the cloud providers, the volume plugins and the kubelet's
// packages: 301 packages more to compile on a fresh machine (369 beside
// kube-apiserver's, against 68), which no test runs.
//
// Controllers (--controllers, names or kube-controller-manager's aliases):
//
//   - endpointslice-mirroring-controller: legacy Endpoints to EndpointSlices;
//   - garbage-collector-controller: owner references, orphaning deletes;
//   - clusterrole-aggregation-controller: aggregated ClusterRoles.
//
// There is one replica (--leader-elect must be false) and no serving port
// (--secure-port must be 0).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/discovery"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/kubernetes/pkg/controller/endpointslicemirroring"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
)

// Settings as kube-controller-manager's defaults have them
// (pkg/controller/*/config/v1alpha1).
const (
	mirroringMaxEndpointsPerSubset = 1000
	mirroringWorkers               = 5
	garbageCollectorWorkers        = 20
	aggregationWorkers             = 5
	// resync is kube-controller-manager's --min-resync-period.
	resync = 12 * time.Hour
	// gcSyncPeriod is how often the garbage collector rereads discovery,
	// as kube-controller-manager does.
	gcSyncPeriod = 30 * time.Second
)

// aliases maps kube-controller-manager's short names to the full ones.
var aliases = map[string]string{
	"endpointslicemirroring":  "endpointslice-mirroring-controller",
	"garbagecollector":        "garbage-collector-controller",
	"clusterrole-aggregation": "clusterrole-aggregation-controller",
}

// clients are what the controllers are built from.
type clients struct {
	kube              kubernetes.Interface
	metadata          metadata.Interface
	discovery         discovery.DiscoveryInterface
	informers         informers.SharedInformerFactory
	metadataInformers metadatainformer.SharedInformerFactory
	started           chan struct{}
}

// starters build each controller and return what runs it.
var starters = map[string]func(context.Context, *clients) (func(context.Context), error){
	"endpointslice-mirroring-controller": func(ctx context.Context, c *clients) (func(context.Context), error) {
		m := endpointslicemirroring.NewController(ctx,
			c.informers.Core().V1().Endpoints(), c.informers.Discovery().V1().EndpointSlices(), c.informers.Core().V1().Services(),
			mirroringMaxEndpointsPerSubset, c.kube, 0)
		return func(ctx context.Context) { m.Run(ctx, mirroringWorkers) }, nil
	},
	"garbage-collector-controller": func(ctx context.Context, c *clients) (func(context.Context), error) {
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(c.discovery))
		gc, err := garbagecollector.NewGarbageCollector(ctx, c.kube, c.metadata, mapper,
			garbagecollector.DefaultIgnoredResources(),
			informerfactory.NewInformerFactory(c.informers, c.metadataInformers), c.started)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) {
			go gc.Sync(ctx, c.discovery, gcSyncPeriod)
			gc.Run(ctx, garbageCollectorWorkers, gcSyncPeriod)
		}, nil
	},
	"clusterrole-aggregation-controller": func(_ context.Context, c *clients) (func(context.Context), error) {
		a := clusterroleaggregation.NewClusterRoleAggregation(c.informers.Rbac().V1().ClusterRoles(), c.kube.RbacV1())
		return func(ctx context.Context) { a.Run(ctx, aggregationWorkers) }, nil
	},
}

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	controllers := flag.String("controllers", "", "comma-separated controllers to run: "+strings.Join(names(), ", "))
	leaderElect := flag.Bool("leader-elect", false, "must be false: one replica")
	securePort := flag.Int("secure-port", 0, "must be 0: nothing is served")
	flag.Parse()
	if err := run(*kubeconfig, *controllers, *leaderElect, *securePort); err != nil {
		fmt.Fprintln(os.Stderr, "kube-controller-manager (tests):", err)
		os.Exit(1)
	}
}

func run(kubeconfig, controllers string, leaderElect bool, securePort int) error {
	if leaderElect || securePort != 0 {
		return fmt.Errorf("--leader-elect=false and --secure-port=0 are the only settings here")
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	c := &clients{started: make(chan struct{})}
	if c.kube, err = kubernetes.NewForConfig(config); err != nil {
		return err
	}
	if c.metadata, err = metadata.NewForConfig(config); err != nil {
		return err
	}
	if c.discovery, err = discovery.NewDiscoveryClientForConfig(config); err != nil {
		return err
	}
	c.informers = informers.NewSharedInformerFactory(c.kube, resync)
	c.metadataInformers = metadatainformer.NewSharedInformerFactory(c.metadata, resync)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var runs []func(context.Context)
	for _, name := range strings.Split(controllers, ",") {
		if full, ok := aliases[name]; ok {
			name = full
		}
		start, ok := starters[name]
		if !ok {
			return fmt.Errorf("--controllers: %q is not one of %s", name, strings.Join(names(), ", "))
		}
		r, err := start(ctx, c)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		runs = append(runs, r)
		klog.InfoS("Started controller", "controller", name)
	}
	// As kube-controller-manager: the informers start once every
	// controller has asked for its own.
	c.informers.Start(ctx.Done())
	c.metadataInformers.Start(ctx.Done())
	close(c.started)
	for _, r := range runs {
		go r(ctx)
	}
	<-ctx.Done()
	return nil
}

// names lists the controllers there are.
func names() []string {
	out := make([]string, 0, len(starters))
	for name := range starters {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
