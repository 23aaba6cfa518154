package netlab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Host is a backend host: a namespace of its own with one address of each
// family on the bridge, and the servers the test starts in it.
type Host struct {
	// Name is what its servers answer.
	Name string
	// Addr4 and Addr6 are its addresses.
	Addr4, Addr6 netip.Addr
	ns           *Namespace

	mu      sync.Mutex
	closers map[string]io.Closer
}

// AddHost creates a backend host. Hosts are numbered from 10 in the order
// they are added: the n-th has 192.0.2.(9+n) and 2001:db8:1::(9+n).
func (l *Lab) AddHost(name string) (*Host, error) {
	l.mu.Lock()
	n := len(l.hosts) + 10
	l.mu.Unlock()
	if n > 250 {
		return nil, errors.New("netlab: at most 241 hosts")
	}
	h := &Host{
		Name:    name,
		Addr4:   netip.AddrFrom4([4]byte{192, 0, 2, byte(n)}),
		Addr6:   netip.MustParseAddr("2001:db8:1::" + strconv.FormatInt(int64(n), 16)),
		closers: map[string]io.Closer{},
	}
	ns, err := createNamespace(fmt.Sprintf("%s-h%d", l.id, n))
	if err != nil {
		return nil, err
	}
	h.ns = ns
	veth := fmt.Sprintf("v%d", n)
	steps := []func() error{
		func() error {
			return l.Node.IP("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns.Name)
		},
		func() error { return l.Node.IP("link", "set", veth, "master", "br0", "up") },
		func() error { return ns.IP("addr", "add", h.Addr4.String()+"/24", "dev", "eth0") },
		func() error { return ns.IP("addr", "add", h.Addr6.String()+"/64", "dev", "eth0", "nodad") },
		func() error { return ns.IP("link", "set", "eth0", "up") },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, errors.Join(err, ns.remove())
		}
	}
	l.mu.Lock()
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	return h, nil
}

// Namespace is the host's namespace, for servers the lab does not provide.
func (h *Host) Namespace() *Namespace { return h.ns }

// ServeTCP starts a TCP server on port, on both of the host's addresses:
// each connection first gets the host's name and a newline, then every line
// it sends is echoed back, until it closes. Echoing lets a test keep a
// connection open and see that it still works (a drain). A server that
// already runs is left as it is.
func (h *Host) ServeTCP(port int) error {
	if h.serving("tcp", port) {
		return nil
	}
	l, err := h.ns.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go h.echo(c)
		}
	}()
	h.track("tcp/"+strconv.Itoa(port), l)
	return nil
}

func (h *Host) echo(c net.Conn) {
	defer c.Close()
	if _, err := io.WriteString(c, h.Name+"\n"); err != nil {
		return
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, line); err != nil {
			return
		}
	}
}

// ServeUDP starts a UDP server on port, on both addresses, that answers
// every datagram with the host's name.
func (h *Host) ServeUDP(port int) error {
	pc, err := h.ns.ListenPacket("udp", ":"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(h.Name), from)
		}
	}()
	h.track("udp/"+strconv.Itoa(port), pc)
	return nil
}

// ServeHTTP starts an HTTP server on port, on both addresses, whose every
// answer is 200 with the host's name as the body.
func (h *Host) ServeHTTP(port int) error {
	l, err := h.ns.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, h.Name)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	h.track("http/"+strconv.Itoa(port), srv)
	return nil
}

// Stop stops the host's server of proto ("tcp", "udp" or "http") on port,
// as a crashed process would: new connections are refused.
func (h *Host) Stop(proto string, port int) error {
	key := proto + "/" + strconv.Itoa(port)
	h.mu.Lock()
	c, ok := h.closers[key]
	delete(h.closers, key)
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("netlab: %s serves no %s", h.Name, key)
	}
	return c.Close()
}

// serving tells whether the host's server of proto runs on port.
func (h *Host) serving(proto string, port int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.closers[proto+"/"+strconv.Itoa(port)]
	return ok
}

func (h *Host) track(key string, c io.Closer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.closers[key]; ok {
		_ = old.Close()
	}
	h.closers[key] = c
}

// close stops the host's servers and removes its namespace (and with it
// both ends of its veth link).
func (h *Host) close() error {
	h.mu.Lock()
	closers := h.closers
	h.closers = map[string]io.Closer{}
	h.mu.Unlock()
	for _, c := range closers {
		_ = c.Close()
	}
	return h.ns.remove()
}
