package netlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// HTTPClient is an HTTP client whose connections are opened inside n.
func (n *Namespace) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:       n.Dial,
			DisableKeepAlives: true,
		},
	}
}

// Kubeconfig writes a kubeconfig to path with the credentials of cfg that
// reaches the API server from inside the node namespace, through a
// forwarder to cfg's host.
func (l *Lab) Kubeconfig(cfg *rest.Config, path string) error {
	u, err := neturl.Parse(cfg.Host)
	if err != nil {
		return fmt.Errorf("API server address %q: %w", cfg.Host, err)
	}
	addr, err := l.Forward(u.Host)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{
		Server:                   "https://" + addr,
		CertificateAuthorityData: cfg.CAData,
		// The API server's certificate names 127.0.0.1, which the
		// forwarder's address is too.
		TLSServerName: cfg.ServerName,
	}
	kc.AuthInfos["lab"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
	}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "lab"}
	kc.CurrentContext = "lab"
	return clientcmd.WriteToFile(*kc, path)
}

// KubeProxy runs kube-proxy (bin) in nftables mode in the node namespace,
// as node nodeName, and waits until it has programmed its first rules
// (its /healthz answers 200).
//
// --conntrack-max-per-core 0 keeps it from setting the machine-wide
// conntrack limit; the conntrack timeouts it does set are per namespace.
// minSyncPeriod stays at kube-proxy's default (1 s), as on a real node: a
// change that comes less than 1 s after the last sync waits for the rest.
//
// --vmodule proxier=9 logs every nftables transaction the proxier runs
// (and nothing more of the rest), so that Capture can tell what was
// programmed when a connection failed.
func (l *Lab) KubeProxy(ctx context.Context, bin, kubeconfig, nodeName, dir string) (*Process, error) {
	const healthz = "127.0.0.1:10256"
	p, err := l.Start(filepath.Join(dir, "kube-proxy.log"), bin,
		"--kubeconfig", kubeconfig,
		"--hostname-override", nodeName,
		"--proxy-mode", "nftables",
		"--conntrack-max-per-core", "0",
		"--healthz-bind-address", healthz,
		"--metrics-bind-address", "127.0.0.1:10249",
		"--v", "2",
		"--vmodule", "proxier=9",
	)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.kubeProxy = p
	l.mu.Unlock()
	return p, l.waitHTTP(ctx, p, "http://"+healthz+"/healthz")
}

// ControllerManager runs kube-controller-manager (bin) in the node
// namespace with only the named controllers (for example
// endpointslice-mirroring-controller and garbage-collector-controller), one instance without
// leader election, and no serving port (--secure-port 0): nothing listens,
// so it needs no certificate and no port of the machine. It has no health
// endpoint then; a test tells it works by what its controllers do.
func (l *Lab) ControllerManager(bin, kubeconfig, dir string, controllers ...string) (*Process, error) {
	return l.Start(filepath.Join(dir, "kube-controller-manager.log"), bin,
		"--kubeconfig", kubeconfig,
		"--controllers", strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port", "0",
		"--v", "2",
	)
}

// CoreDNS runs CoreDNS (bin) in the node namespace on 127.0.0.1:port with
// the kubernetes plugin for domain, and waits until it has synced with the
// API server (its ready plugin answers 200).
func (l *Lab) CoreDNS(ctx context.Context, bin, kubeconfig, domain string, port int, dir string) (*Process, error) {
	const ready = "127.0.0.1:8181"
	corefile := filepath.Join(dir, "Corefile")
	conf := fmt.Sprintf(`%s:%d {
    bind 127.0.0.1
    errors
    ready %s
    kubernetes %s {
        kubeconfig %s
    }
}
`, domain, port, ready, domain, kubeconfig)
	if err := os.WriteFile(corefile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := l.Start(filepath.Join(dir, "coredns.log"), bin, "-conf", corefile)
	if err != nil {
		return nil, err
	}
	return p, l.waitHTTP(ctx, p, "http://"+ready+"/ready")
}

// waitHTTP polls url from the node namespace until it answers 200, the
// process ends or ctx is done.
func (l *Lab) waitHTTP(ctx context.Context, p *Process, url string) error {
	c := l.Node.HTTPClient(time.Second)
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := c.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("%s ended before %s answered (see its log): %w", p.name, url, errors.Join(p.Err(), errExited))
		case <-ctx.Done():
			return fmt.Errorf("%s: %s did not answer 200 (last: %s): %w", p.name, url, last, errNotReady)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// HostPort joins an address and a port (IPv6 in brackets).
func HostPort(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }
