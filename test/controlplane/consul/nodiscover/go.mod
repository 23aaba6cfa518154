// Stands in for github.com/hashicorp/go-discover in the test Consul agent
// (test/controlplane/consul, a replace directive): the agent keeps the same
// retry_join code, but no cloud provider's SDK is compiled into it. The
// tests join nothing by cloud tag, and those SDKs (AWS EC2, Azure, GCE,
// vSphere, ...) were 159 of the agent's 1,372 packages.
module github.com/hashicorp/go-discover

go 1.26.0
