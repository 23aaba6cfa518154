// Command consul is a Consul agent for the backendslice tests. It builds only
// `consul agent` from github.com/hashicorp/consul: the full Consul CLI does not
// build against the published consul/api module. Usage is the same as
// `consul agent`, e.g.
//
//	consul agent -dev -bind 127.0.0.1 -client 127.0.0.1
//
// The leading "agent" argument is optional.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/consul/command/agent"
	"github.com/hashicorp/consul/command/cli"
	"github.com/hashicorp/consul/version"
	mcli "github.com/mitchellh/cli"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
		fmt.Printf("Consul v%s (agent only)\n", version.GetHumanVersion())
		return
	}
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	ui := &cli.BasicUI{BasicUi: mcli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr}}
	os.Exit(agent.New(ui).Run(args))
}
