package health

import (
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// TestProvidersHonourProxyVariables runs the binary with HTTPS_PROXY and
// HTTP_PROXY (as the chart's proxy values set them) naming a forward proxy,
// and gives it a Consul agent over TLS and the AWS EC2 API under names that
// do not resolve: consul.test (the name in the agent's certificate) and
// aws.proxied.test. Only the proxy knows where they are, so the backend's
// two sources publish only if the Consul client tunnels through the proxy
// (CONNECT, for https) and the AWS SDK sends its requests to it (for http).
// Probes and DNS sources never use a proxy (probe.tlsClient sets none).
func TestProvidersHonourProxyVariables(t *testing.T) {
	agent := consultest.Run(t, consultest.Config{Node: "proxied", TLS: true})
	if err := agent.Register(consultest.Service{Name: "payments", Address: "192.0.2.10"}); err != nil {
		t.Fatal(err)
	}
	aws := awstest.New()
	t.Cleanup(aws.Close)
	aws.PutEC2Instance(awstest.EC2Instance{ID: "i-0123456789abcdef0", State: "running", PrivateIP: "192.0.2.20", Zone: "eu-west-1a"})
	awsURL, err := url.Parse(aws.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, httpsPort, _ := net.SplitHostPort(agent.HTTPSAddr)
	consulName := consultest.TLSServerName + ":" + httpsPort
	proxy := newForwardProxy(t, map[string]string{consulName: agent.HTTPSAddr, "aws.proxied.test:80": awsURL.Host})

	startBinary(t, "controller", []string{
		"HTTPS_PROXY=" + proxy.URL, "HTTP_PROXY=" + proxy.URL, "NO_PROXY=",
		"AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
		"AWS_REGION=eu-west-1", "AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}, "--allow-sources-without-provider", "--consul-address=https://"+consulName, "--consul-ca-file="+agent.CAFile,
		"--aws-endpoint-url=http://aws.proxied.test", "--aws-max-attempts=2")

	ns := framework.Namespace(t)
	xb := framework.Backend(ns, "proxied", v1alpha1.Source{Name: "svc", Consul: &v1alpha1.ConsulSource{Service: "payments"}},
		v1alpha1.Source{Name: "vms", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1", InstanceIDs: []string{"i-0123456789abcdef0"}}})
	create(t, xb)
	framework.WaitAddresses(t, ns, "proxied", "192.0.2.10", "192.0.2.20")
	for _, target := range []string{"CONNECT " + consulName, "POST aws.proxied.test:80"} {
		if proxy.seen(target) == 0 {
			t.Errorf("the proxy saw no %s; it saw %v", target, proxy.all())
		}
	}
}

// forwardProxy is an HTTP forward proxy that knows where some names are:
// it tunnels CONNECT host:port and forwards absolute-URI requests to the
// address routes maps them to, and refuses any other destination. It
// counts what it was asked, by method and host:port.
type forwardProxy struct {
	*httptest.Server
	routes map[string]string
	mu     sync.Mutex
	asked  map[string]int
}

func newForwardProxy(t *testing.T, routes map[string]string) *forwardProxy {
	t.Helper()
	p := &forwardProxy{routes: routes, asked: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *forwardProxy) serve(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host += ":80"
	}
	p.mu.Lock()
	p.asked[r.Method+" "+host]++
	p.mu.Unlock()
	to, ok := p.routes[host]
	switch {
	case !ok:
		http.Error(w, "no route to "+host, http.StatusBadGateway)
	case r.Method == http.MethodConnect:
		p.tunnel(w, to)
	default:
		rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", to
		}}
		rp.ServeHTTP(w, r)
	}
}

// tunnel connects the client to addr, both ways, until either side closes.
func (p *forwardProxy) tunnel(w http.ResponseWriter, addr string) {
	upstream, err := net.Dial("tcp", addr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	client, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	_, _ = client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	go func() {
		_, _ = io.Copy(upstream, client)
		_ = upstream.Close()
	}()
	go func() {
		_, _ = io.Copy(client, upstream)
		_ = client.Close()
	}()
}

// seen is how many times the proxy was asked target ("METHOD host:port").
func (p *forwardProxy) seen(target string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked[target]
}

// all is what the proxy was asked.
func (p *forwardProxy) all() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.asked)
}
