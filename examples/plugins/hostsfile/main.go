// Command hostsfile is a provider plugin, built on the SDK, that publishes
// the hosts of a file a team keeps in Git (mounted from a ConfigMap, or
// synced by git-sync): groups of hosts, each with its zone, name, port and
// state, and the namespaces that may publish it.
//
//	groups:
//	  web:
//	    namespaces: [payments]          # who may publish the group (consent)
//	    hosts:
//	      - {address: 192.0.2.10, zone: eu-west-1a, hostname: web-0, port: 8080}
//	      - {address: 192.0.2.11, state: draining}   # serving (default), down or draining
//
// A source asks for one group: `plugin: {parameters: {group: web}}`. The
// file is read again when it changes, and the change is pushed to the
// controller at once (long-polls). A file that does not parse keeps the
// last one that did and says so on every source (Unavailable), so that a
// bad commit takes nothing away.
//
// Consent comes first: a namespace a group does not list is refused
// (Forbidden) alike whether the group exists or not, so that no namespace
// learns which groups exist. A group taken out of the file is NotFound
// (its endpoints drain) to the namespaces it listed last, which the
// plugin remembers while it runs; to every other namespace it is
// Forbidden, as a group that never was.
//
//	hostsfile -listen 127.0.0.1:9100 -file /etc/hosts.d/hosts.yaml [-token-file F] [-tls-cert F -tls-key F]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/backendslice/backendslice/providers/plugin/sdk"
)

// File is the hosts file.
type File struct {
	Groups map[string]Group `json:"groups"`
}

// Group is hosts published together, and who may publish them.
type Group struct {
	// Namespaces that may publish the group; "*" admits every one.
	Namespaces []string `json:"namespaces"`
	Hosts      []Host   `json:"hosts"`
}

// Host is one address of a group.
type Host struct {
	Address  string `json:"address"`
	Zone     string `json:"zone,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	Port     int32  `json:"port,omitempty"`
	// State is serving (the default), down (published not ready) or
	// draining (published terminating).
	State string `json:"state,omitempty"`
}

// States of a host.
const (
	stateServing  = "serving"
	stateDown     = "down"
	stateDraining = "draining"
)

// groupName is what a group parameter may be.
var groupName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// hosts holds the file's last good contents.
type hosts struct {
	path string
	mu   sync.Mutex
	file File
	// gone are the groups taken out of the file since the plugin started,
	// each with the namespaces it listed last.
	gone map[string][]string
	// raw is what was last read, good or not; broken says why it is not.
	raw    []byte
	broken error
}

// load reads the file and reports whether what it holds changed.
func (h *hosts) load() (bool, error) {
	raw, err := os.ReadFile(h.path)
	if err != nil {
		return false, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if string(raw) == string(h.raw) {
		return false, nil
	}
	h.raw = raw
	var f File
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		h.broken = err
		return true, err
	}
	if err := f.check(); err != nil {
		h.broken = err
		return true, err
	}
	if h.gone == nil {
		h.gone = map[string][]string{}
	}
	for name, g := range h.file.Groups {
		if _, ok := f.Groups[name]; !ok {
			h.gone[name] = g.Namespaces
		}
	}
	for name := range f.Groups {
		delete(h.gone, name)
	}
	h.file, h.broken = f, nil
	return true, nil
}

// check refuses a file the plugin cannot serve as written.
func (f File) check() error {
	for name, g := range f.Groups {
		if !groupName.MatchString(name) {
			return fmt.Errorf("groups.%s: a group name is a DNS label", name)
		}
		for i, h := range g.Hosts {
			if h.Address == "" {
				return fmt.Errorf("groups.%s.hosts[%d].address: required", name, i)
			}
			if !slices.Contains([]string{"", stateServing, stateDown, stateDraining}, h.State) {
				return fmt.Errorf("groups.%s.hosts[%d].state: %q is not serving, down or draining", name, i, h.State)
			}
		}
	}
	return nil
}

// validate refuses parameters other than one group name.
func validate(r sdk.Request) error {
	for k := range r.Parameters {
		if k != "group" {
			return sdk.InvalidParameters("unknown parameter %q; this plugin takes one, group", k)
		}
	}
	g := r.Parameters["group"]
	if !groupName.MatchString(g) {
		return sdk.InvalidParameters("group: %q is not a group name (a DNS label, such as web)", g)
	}
	return nil
}

// admit refuses a namespace that the group does not list, or did not
// list last if it is gone: the same refusal whether the group exists or
// not.
func (h *hosts) admit(_ context.Context, r sdk.Request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	name := r.Parameters["group"]
	g, ok := h.file.Groups[name]
	namespaces := g.Namespaces
	if !ok {
		namespaces, ok = h.gone[name]
	}
	if !ok || (!slices.Contains(namespaces, "*") && !slices.Contains(namespaces, r.Namespace)) {
		return sdk.Forbidden("group %q is not published to namespace %s: no group of that name lists it in its namespaces", name, r.Namespace)
	}
	return nil
}

// resolve answers an admitted request with the group's hosts.
func (h *hosts) resolve(_ context.Context, r sdk.Request) (sdk.Answer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.broken != nil {
		return sdk.Answer{}, sdk.Unavailable("%s does not parse (%v); what was published from it stays until the file is fixed", h.path, h.broken)
	}
	name := r.Parameters["group"]
	g, ok := h.file.Groups[name]
	if !ok {
		return sdk.Answer{}, sdk.NotFound("%s no longer has group %q", h.path, name)
	}
	eps := make([]sdk.Endpoint, 0, len(g.Hosts))
	for _, host := range g.Hosts {
		eps = append(eps, sdk.Endpoint{Address: host.Address, Zone: host.Zone, Hostname: host.Hostname, Port: host.Port,
			Serving: host.State != stateDown, Terminating: host.State == stateDraining})
	}
	return sdk.Answer{Endpoints: eps}, nil
}

// watch reads the file every period and pushes a change.
func (h *hosts) watch(ctx context.Context, p *sdk.Plugin, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := h.load()
		if err != nil {
			log.Printf("reading %s: %v", h.path, err)
		}
		if changed {
			p.Changed()
		}
	}
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:9100", "address to listen on")
	path := flag.String("file", "", "the hosts file (YAML or JSON)")
	period := flag.Duration("period", time.Second, "how often the file is read again")
	tokenFile := flag.String("token-file", "", "file holding the bearer token the controller sends (read for every request)")
	cert := flag.String("tls-cert", "", "certificate to serve HTTPS with (with -tls-key)")
	key := flag.String("tls-key", "", "its key")
	push := flag.Bool("push", true, "push changes (long-polls); false answers polls only")
	flag.Parse()
	if *path == "" {
		return errors.New("-file is required")
	}
	h := &hosts{path: *path}
	if _, err := h.load(); err != nil {
		return fmt.Errorf("reading %s: %w", *path, err)
	}
	p := &sdk.Plugin{Name: "hostsfile", Version: "1", Validate: validate, Admit: h.admit, Resolve: h.resolve, Push: *push}
	if *tokenFile != "" {
		p.Token = func() string {
			b, err := os.ReadFile(*tokenFile)
			if err != nil {
				// No token can be matched: every request is refused.
				return "\x00unreadable"
			}
			return strings.TrimSpace(string(b))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go h.watch(ctx, p, *period)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// The address, for whoever started the plugin on port 0.
	fmt.Println("listening on", ln.Addr())
	srv := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if *cert != "" {
		err = srv.ServeTLS(ln, *cert, *key)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
