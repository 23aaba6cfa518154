// Command verbatim is a provider plugin for tests that answers exactly
// what a file says, broken or not: the answers of a plugin written
// carelessly in any language, from a process of its own. The file is read
// again for every request, so a test changes the answer by rewriting it:
//
//	{"info":    {"status": 200, "body": "{\"protocolVersions\": [\"v1\"]}"},
//	 "resolve": {"status": 200, "body": "{\"endpoints\": [], \"refreshAfterSeconds\": 1}"}}
//
// An operation the file leaves out answers as above.
//
//	verbatim -listen 127.0.0.1:0 -file answers.json
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/backendslice/backendslice/providers/plugin/protocol"
)

// Reply is one answer: a status and a body, sent as they are.
type Reply struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

// Answers are the file: a reply for each operation.
type Answers struct {
	Info    *Reply `json:"info,omitempty"`
	Resolve *Reply `json:"resolve,omitempty"`
}

// Defaults of the operations the file leaves out.
var (
	defaultInfo    = Reply{Status: http.StatusOK, Body: `{"protocolVersions":["` + protocol.Version + `"]}`}
	defaultResolve = Reply{Status: http.StatusOK, Body: `{"endpoints":[],"refreshAfterSeconds":1}`}
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	path := flag.String("file", "", "the answers file (JSON)")
	flag.Parse()
	if *path == "" {
		return errors.New("-file is required")
	}
	reply := func(w http.ResponseWriter, pick func(Answers) *Reply, def Reply) {
		r := def
		var a Answers
		b, err := os.ReadFile(*path)
		if err == nil {
			err = json.Unmarshal(b, &a)
		}
		if err != nil {
			r = Reply{Status: http.StatusServiceUnavailable,
				Body: fmt.Sprintf(`{"error":{"code":"Unavailable","message":%q}}`, "the answers file: "+err.Error())}
		} else if p := pick(a); p != nil {
			r = *p
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(r.Status)
		_, _ = w.Write([]byte(r.Body))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.InfoPath, func(w http.ResponseWriter, _ *http.Request) {
		reply(w, func(a Answers) *Reply { return a.Info }, defaultInfo)
	})
	mux.HandleFunc("POST "+protocol.ResolvePath, func(w http.ResponseWriter, _ *http.Request) {
		reply(w, func(a Answers) *Reply { return a.Resolve }, defaultResolve)
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// The address, for whoever started the plugin on port 0.
	fmt.Println("listening on", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}
