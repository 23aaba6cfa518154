// Package awstest is an HTTP server that speaks the AWS protocols of
// exactly the calls backendslice makes: the Query protocol of RDS
// DescribeDBInstances and DescribeDBClusters (API version 2014-10-31), EC2
// DescribeInstances (2016-11-15), ElastiCache DescribeReplicationGroups,
// DescribeCacheClusters, DescribeServerlessCaches and ListTagsForResource
// (2015-02-02) and STS AssumeRole and GetCallerIdentity (2011-06-15), and
// the JSON 1.1 protocol of MemoryDB DescribeClusters and ListTags. No AWS
// emulator runs here, so the real aws-sdk-go-v2 clients are pointed at this
// server through BaseEndpoint and talk to it on the wire: form-encoded POST
// bodies in, XML documents and XML error bodies out (Query), or JSON
// bodies named by the X-Amz-Target header in and JSON out (MemoryDB), as
// the AWS API reference shapes them.
//
// Tests change its state (instances, clusters and their members, caches,
// their shards and nodes, statuses, addresses, tags), fail over a
// replication group's shard, make the next calls of an action fail with an AWS error
// code (throttling, access denied), cap page sizes to force pagination, make
// an action repeat its pagination token forever, stall an action's requests
// while the test acts, and count the calls of each action, by the access key
// they were signed with. Requests that are not SigV4 signed for the right
// service are refused, as AWS refuses them.
//
// Several AWS accounts can live in one server: AddRole makes a role
// assumable, its credentials signing with an access key of its own, and
// SetAccount limits what callers signing with an access key see, as an
// account sees only its own instances.
package awstest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Actions the server answers.
const (
	DescribeDBInstances = "DescribeDBInstances"
	DescribeDBClusters  = "DescribeDBClusters"
	DescribeInstances   = "DescribeInstances"
	AssumeRole          = "AssumeRole"
	GetCallerIdentity   = "GetCallerIdentity"

	// ElastiCache (Query protocol).
	DescribeReplicationGroups = "DescribeReplicationGroups"
	DescribeCacheClusters     = "DescribeCacheClusters"
	DescribeServerlessCaches  = "DescribeServerlessCaches"
	ListTagsForResource       = "ListTagsForResource"

	// MemoryDB (JSON 1.1 protocol).
	DescribeClusters = "DescribeClusters"
	ListTags         = "ListTags"
)

// API versions the SDK sends in the Version field.
const (
	rdsVersion = "2014-10-31"
	ec2Version = "2016-11-15"
	stsVersion = "2011-06-15"

	elastiCacheVersion = "2015-02-02"
	// memoryDBTarget is the prefix of MemoryDB's X-Amz-Target header.
	memoryDBTarget = "AmazonMemoryDB"
)

// DBInstance is an RDS DB instance as DescribeDBInstances reports it.
type DBInstance struct {
	// Identifier is the DBInstanceIdentifier.
	Identifier string
	// Status is the DBInstanceStatus (available, rebooting, deleting, ...).
	Status string
	// Address and Port are the instance's own endpoint; an empty Address
	// leaves the Endpoint element out, as for an instance being created.
	Address string
	Port    int32
	// IPs are what Address resolves to (both families for a dual-stack
	// instance); LookupNetIP answers with them.
	IPs []string
	// Zone is the AvailabilityZone.
	Zone string
	// Cluster is the DBClusterIdentifier of an Aurora member.
	Cluster string
	// NetworkType is IPV4 or DUAL.
	NetworkType string
	// Tags are the instance's tags (TagList).
	Tags map[string]string
}

// DBCluster is an Aurora DB cluster as DescribeDBClusters reports it.
type DBCluster struct {
	// Identifier is the DBClusterIdentifier.
	Identifier string
	// Status is the cluster's Status.
	Status string
	// Members are the DBClusterMembers.
	Members []ClusterMember
	// Tags are the cluster's tags (TagList).
	Tags map[string]string
}

// ClusterMember is one instance of a cluster.
type ClusterMember struct {
	// Instance is the member's DBInstanceIdentifier.
	Instance string
	// Writer is IsClusterWriter.
	Writer bool
}

// EC2Instance is an EC2 instance as DescribeInstances reports it.
type EC2Instance struct {
	// ID is the instance ID.
	ID string
	// State is the instance state name (pending, running, stopping, ...).
	State string
	// PrivateIP, PublicIP and IPv6 are the instance's addresses; empty ones
	// are left out of the answer.
	PrivateIP, PublicIP, IPv6 string
	// Zone is the placement's availability zone.
	Zone string
	// Tags are the instance's tags (tagSet).
	Tags map[string]string
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base endpoint to give the SDK clients.
	URL string

	srv *httptest.Server

	mu        sync.Mutex
	instances map[string]DBInstance
	clusters  map[string]DBCluster
	ec2       map[string]EC2Instance
	// groups, cacheClusters and serverless are ElastiCache's, memoryDB
	// MemoryDB's clusters, by ID or name.
	groups        map[string]ReplicationGroup
	cacheClusters map[string]CacheCluster
	serverless    map[string]ServerlessCache
	memoryDB      map[string]MemoryDBCluster
	faults        map[string][]string
	repeat        map[string]bool
	stalls        map[string]chan struct{}
	calls         map[string]int
	pageLimit     int
	credential    map[string]int
	// callsBy counts requests by action and access key.
	callsBy map[callerKey]int
	// roles are the assumable role ARNs and the access key of each.
	roles map[string]string
	// sessions are the session names roles were last assumed with, by
	// the access key of the role.
	sessions map[string]string
	// accounts are what callers signing with an access key see, by ID;
	// a key without an entry sees everything.
	accounts map[string]map[string]bool
}

// callerKey is an action and the access key a request of it was signed with.
type callerKey struct{ action, accessKey string }

// New starts a fake on 127.0.0.1. Close stops it.
func New() *Server {
	s := &Server{
		instances: map[string]DBInstance{},
		clusters:  map[string]DBCluster{},
		ec2:       map[string]EC2Instance{},

		groups:        map[string]ReplicationGroup{},
		cacheClusters: map[string]CacheCluster{},
		serverless:    map[string]ServerlessCache{},
		memoryDB:      map[string]MemoryDBCluster{},
		faults:        map[string][]string{},
		repeat:        map[string]bool{},
		stalls:        map[string]chan struct{}{},
		calls:         map[string]int{},
		credential:    map[string]int{},
		callsBy:       map[callerKey]int{},
		roles:         map[string]string{},
		sessions:      map[string]string{},
		accounts:      map[string]map[string]bool{},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// PutDBInstance adds or replaces a DB instance.
func (s *Server) PutDBInstance(i DBInstance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances[i.Identifier] = cloneDBInstance(i)
}

// UpdateDBInstance changes the DB instance id in place; it panics when there
// is none, which is a mistake in the test.
func (s *Server) UpdateDBInstance(id string, change func(*DBInstance)) {
	update(s, s.instances, "DB instance", id, cloneDBInstance, change)
}

// update changes the entry id of m in place through change, on a copy
// (clone makes one) so that the test shares no slice or map with the
// server; what names the kind of entry when there is none, which is a
// mistake in the test.
func update[V any](s *Server, m map[string]V, what, id string, clone func(V) V, change func(*V)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := m[id]
	if !ok {
		panic("awstest: no " + what + " " + id)
	}
	v = clone(v)
	change(&v)
	m[id] = clone(v)
}

// DeleteDBInstance removes a DB instance, as AWS does once it is deleted,
// and takes it out of its cluster's members.
func (s *Server) DeleteDBInstance(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.instances, id)
	for cid, c := range s.clusters {
		c.Members = slices.DeleteFunc(c.Members, func(m ClusterMember) bool { return m.Instance == id })
		s.clusters[cid] = c
	}
}

// PutDBCluster adds or replaces a cluster.
func (s *Server) PutDBCluster(c DBCluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Members = slices.Clone(c.Members)
	c.Tags = maps.Clone(c.Tags)
	s.clusters[c.Identifier] = c
}

// DeleteDBCluster removes a cluster.
func (s *Server) DeleteDBCluster(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clusters, id)
}

// Failover makes writer the writer of cluster id and every other member a
// reader, as an Aurora failover does.
func (s *Server) Failover(id, writer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clusters[id]
	if !ok {
		panic("awstest: no DB cluster " + id)
	}
	c.Members = slices.Clone(c.Members)
	for i := range c.Members {
		c.Members[i].Writer = c.Members[i].Instance == writer
	}
	s.clusters[id] = c
}

// PutEC2Instance adds or replaces an EC2 instance.
func (s *Server) PutEC2Instance(i EC2Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i.Tags = maps.Clone(i.Tags)
	s.ec2[i.ID] = i
}

// SetEC2State changes the state of EC2 instance id.
func (s *Server) SetEC2State(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.ec2[id]
	if !ok {
		panic("awstest: no EC2 instance " + id)
	}
	i.State = state
	s.ec2[id] = i
}

// DeleteEC2Instance removes an EC2 instance, as AWS does about an hour
// after it terminated.
func (s *Server) DeleteEC2Instance(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ec2, id)
}

// Fail makes the next n calls of action fail with the AWS error code (for
// example Throttling, RequestLimitExceeded, AccessDenied,
// UnauthorizedOperation); n < 0 makes every call fail until ClearFaults.
func (s *Server) Fail(action, code string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 {
		s.faults[action] = []string{"*" + code}
		return
	}
	for range n {
		s.faults[action] = append(s.faults[action], code)
	}
}

// RepeatToken makes every page of action that was asked for with a
// pagination token (Marker, NextToken) answer with that same token, as a
// service fault that never ends the listing would, until ClearFaults. The
// first page, asked for without a token, answers normally.
func (s *Server) RepeatToken(action string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repeat[action] = true
}

// Stall makes the requests of action wait, once counted and answered from
// the state of the moment, until release is called or the client gives up, so that a test can act while a listing is
// in flight. release may be called more than once; call it before Close,
// which waits for the requests in flight.
func (s *Server) Stall(action string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.stalls[action] = ch
	return sync.OnceFunc(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.stalls[action] == ch {
			delete(s.stalls, action)
		}
		close(ch)
	})
}

// ClearFaults makes every action answer normally again.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.faults)
	clear(s.repeat)
}

// SetPageLimit caps every page at n items whatever MaxRecords or
// MaxResults asked for, so that pagination shows with few instances; zero
// removes the cap.
func (s *Server) SetPageLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageLimit = n
}

// Calls is how many requests of action the server received, failed ones
// included.
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}

// TotalCalls is how many requests the server received for all actions.
func (s *Server) TotalCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		n += c
	}
	return n
}

// CallsBy is how many requests of action the server received signed with
// accessKey, failed ones included.
func (s *Server) CallsBy(action, accessKey string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.callsBy[callerKey{action, accessKey}]
}

// ResetCalls sets every call counter to zero.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
	clear(s.callsBy)
}

// AddRole makes role (an IAM role ARN) assumable: AssumeRole of it answers
// credentials that sign with accessKey. AssumeRole of any other role is
// refused with AccessDenied, as AWS refuses a role that does not exist or
// does not trust the caller.
func (s *Server) AddRole(role, accessKey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roles[role] = accessKey
}

// SetAccount makes callers signing with accessKey see only the DB
// instances, DB clusters and EC2 instances named in ids, as if those were
// all their account held; ids that are not put are skipped.
func (s *Server) SetAccount(accessKey string, ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accounts[accessKey] = map[string]bool{}
	for _, id := range ids {
		s.accounts[accessKey][id] = true
	}
}

// seerOf tells what a caller signing with accessKey sees; s.mu is held.
func (s *Server) seerOf(accessKey string) func(id string) bool {
	account, ok := s.accounts[accessKey]
	if !ok {
		return func(string) bool { return true }
	}
	return func(id string) bool { return account[id] }
}

// Scopes counts requests by the credential scope they were signed with
// ("<region>/<service>"), so that tests can check the region asked.
func (s *Server) Scopes() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.credential)
}

// credentialScope matches the Credential of a SigV4 Authorization header:
// access key / date / region / service / aws4_request.
var credentialScope = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/,\s]+)/\d{8}/([a-z0-9-]+)/([a-z0-9]+)/aws4_request, SignedHeaders=[^,]+, Signature=[0-9a-f]{64}$`)

// serviceOf is the signing service and API version of each action.
var serviceOf = map[string]struct{ service, version string }{
	DescribeDBInstances: {"rds", rdsVersion},
	DescribeDBClusters:  {"rds", rdsVersion},
	DescribeInstances:   {"ec2", ec2Version},
	AssumeRole:          {"sts", stsVersion},
	GetCallerIdentity:   {"sts", stsVersion},

	DescribeReplicationGroups: {"elasticache", elastiCacheVersion},
	DescribeCacheClusters:     {"elasticache", elastiCacheVersion},
	DescribeServerlessCaches:  {"elasticache", elastiCacheVersion},
	ListTagsForResource:       {"elasticache", elastiCacheVersion},
	// The JSON protocol has no version field: the target names the API.
	DescribeClusters: {"memorydb", memoryDBTarget},
	ListTags:         {"memorydb", memoryDBTarget},
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(w, r)
	if !ok {
		return
	}
	action := req.action
	api, ok := serviceOf[action]
	if !ok {
		writeError(w, req.service(), "InvalidAction", fmt.Sprintf("The action %s is not valid for this web service.", action))
		return
	}
	s.mu.Lock()
	s.calls[action]++
	m := credentialScope.FindStringSubmatch(r.Header.Get("Authorization"))
	accessKey := ""
	if m != nil {
		accessKey = m[1]
		s.credential[m[2]+"/"+m[3]]++
		s.callsBy[callerKey{action, accessKey}]++
	}
	fault := s.nextFault(action)
	stall := s.stalls[action]
	s.mu.Unlock()
	// The answer is made as the request arrives, from the state then, and
	// a stalled request delivers it late: a listing in flight misses what
	// changes meanwhile, as AWS's does.
	answer := httptest.NewRecorder()
	switch {
	case m == nil:
		writeError(answer, api.service, "IncompleteSignature", "Authorization header is not a SigV4 (AWS4-HMAC-SHA256) signature")
	case m[3] != api.service:
		writeError(answer, api.service, "InvalidSignatureException", fmt.Sprintf("Credential should be scoped to correct service: '%s'.", api.service))
	case req.version() != api.version:
		writeError(answer, api.service, "InvalidParameterValue", fmt.Sprintf("Version %q is not %s", req.version(), api.version))
	case fault != "":
		writeError(answer, api.service, fault, faultMessage(fault, api.service, m[2], action))
	default:
		s.answer(answer, action, accessKey, req)
	}
	if stall != nil {
		select {
		case <-stall:
		case <-r.Context().Done():
			return
		}
	}
	maps.Copy(w.Header(), answer.Header())
	w.WriteHeader(answer.Code)
	_, _ = w.Write(answer.Body.Bytes())
}

// nextFault pops the fault injected for action, if any; s.mu is held.
func (s *Server) nextFault(action string) string {
	q := s.faults[action]
	if len(q) == 0 {
		return ""
	}
	if code, always := strings.CutPrefix(q[0], "*"); always {
		return code
	}
	s.faults[action] = q[1:]
	return q[0]
}

// faultMessage is the message AWS gives with an injected error code, to
// a call of action of service in region: a refusal names the caller's
// assumed role and the resources of the account, as AWS's do.
func faultMessage(code, service, region, action string) string {
	switch code {
	case "Throttling":
		return "Rate exceeded"
	case "RequestLimitExceeded":
		return "Request limit exceeded."
	case "AccessDenied", "UnauthorizedOperation":
		return notAuthorized(service+":"+action, "arn:aws:"+service+":"+region+":"+Account+":*")
	}
	return code
}

// Account is the AWS account the server's refusals name.
const Account = "123456789012"

// notAuthorized is AWS's message refusing action (on resource, if any).
func notAuthorized(action, resource string) string {
	msg := "User: arn:aws:sts::" + Account + ":assumed-role/backendslice/test is not authorized to perform: " + action
	if resource != "" {
		msg += " on resource: " + resource
	}
	return msg
}

// answer answers a request of action signed with accessKey.
func (s *Server) answer(w http.ResponseWriter, action, accessKey string, req request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sees := s.seerOf(accessKey)
	var body any
	var err *apiError
	form := req.form
	switch action {
	case DescribeDBInstances:
		body, err = s.describeDBInstances(form, sees)
	case DescribeDBClusters:
		body, err = s.describeDBClusters(form, sees)
	case DescribeInstances:
		body, err = s.describeInstances(form, sees)
	case AssumeRole:
		body, err = s.assumeRole(form)
	case GetCallerIdentity:
		body = s.callerIdentity(accessKey)
	case DescribeReplicationGroups:
		body, err = s.describeReplicationGroups(form, sees)
	case DescribeCacheClusters:
		body, err = s.describeCacheClusters(form, sees)
	case DescribeServerlessCaches:
		body, err = s.describeServerlessCaches(form, sees)
	case ListTagsForResource:
		body, err = s.listTagsForResource(form, sees)
	case DescribeClusters:
		body, err = s.describeMemoryDBClusters(req, sees)
	case ListTags:
		body, err = s.listMemoryDBTags(req, sees)
	}
	service := serviceOf[action].service
	if err != nil {
		writeError(w, service, err.code, err.msg)
		return
	}
	if service == "memorydb" {
		writeJSON(w, http.StatusOK, body)
		return
	}
	writeXML(w, http.StatusOK, body)
}

// LookupNetIP resolves the endpoint name of a DB instance, a cache node, a
// serverless cache or a MemoryDB node to its IPs, so that the server stands
// in for the DNS names AWS gives them; network is "ip", "ip4" or "ip6" as
// for net.Resolver.LookupNetIP.
func (s *Server) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ips, ok := s.names()[host]
	if !ok || len(ips) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, ip := range ips {
		a := netip.MustParseAddr(ip)
		if network == "ip" || (network == "ip4") == a.Is4() {
			out = append(out, a)
		}
	}
	return out, nil
}

// names are the IPs of every endpoint name the server's backends have;
// s.mu is held.
func (s *Server) names() map[string][]string {
	out := map[string][]string{}
	// A serverless cache's reader endpoint is its endpoint's name on
	// another port: the first put of a name is its answer.
	add := func(name string, ips []string) {
		if _, ok := out[name]; name != "" && !ok {
			out[name] = ips
		}
	}
	for _, i := range s.instances {
		add(i.Address, i.IPs)
	}
	for _, c := range s.cacheClusters {
		for _, n := range c.Nodes {
			add(n.Address, n.IPs)
		}
	}
	for _, c := range s.serverless {
		add(c.Address, c.IPs)
		add(c.ReaderAddress, c.ReaderIPs)
	}
	for _, c := range s.memoryDB {
		for _, sh := range c.Shards {
			for _, n := range sh.Nodes {
				add(n.Address, n.IPs)
			}
		}
	}
	return out
}

// cloneDBInstance copies i, so that the test's map is not shared.
func cloneDBInstance(i DBInstance) DBInstance {
	i.Tags = maps.Clone(i.Tags)
	i.IPs = slices.Clone(i.IPs)
	return i
}
