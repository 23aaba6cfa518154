package awstest

import (
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// apiError is an AWS error code and message.
type apiError struct{ code, msg string }

// statusOf is the HTTP status AWS answers an error code with.
func statusOf(code string) int {
	switch code {
	case "AccessDenied", "UnauthorizedOperation", "IncompleteSignature", "InvalidSignatureException":
		return http.StatusForbidden
	case "DBInstanceNotFound", "DBClusterNotFoundFault", "ReplicationGroupNotFoundFault", "CacheClusterNotFound",
		"ServerlessCacheNotFoundFault", "ClusterNotFoundFault":
		return http.StatusNotFound
	case "RequestLimitExceeded":
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

// rdsError is the RDS (awsQuery) error body.
type rdsError struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

// ec2Error is the EC2 (ec2Query) error body.
type ec2Error struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

const requestID = "4f8b1f6e-0d5c-4c6e-9b7a-000000000001"

func writeError(w http.ResponseWriter, service, code, msg string) {
	switch service {
	case "memorydb":
		writeJSONError(w, code, msg)
		return
	case "ec2":
		writeXML(w, statusOf(code), ec2Error{Code: code, Message: msg, RequestID: requestID})
		return
	}
	writeXML(w, statusOf(code), rdsError{Type: "Sender", Code: code, Message: msg, RequestID: requestID})
}

func writeXML(w http.ResponseWriter, status int, body any) {
	out, err := xml.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-Requestid", requestID)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(out)
}

// page cuts ids (sorted) at the position token names, taking at most max
// (capped by limit when it is set), and returns the next token or "": the
// token it was given when repeat is set (see Server.RepeatToken).
func page(ids []string, token string, maxItems, limit int, repeat bool) ([]string, string, *apiError) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(ids) {
			return nil, "", &apiError{"InvalidParameterValue", "invalid pagination token " + token}
		}
		start = n
	}
	if limit > 0 && limit < maxItems {
		maxItems = limit
	}
	end := min(start+maxItems, len(ids))
	next := ""
	switch {
	case repeat && token != "":
		next = token
	case end < len(ids):
		next = strconv.Itoa(end)
	}
	return ids[start:end], next, nil
}

// maxItems reads a page size parameter, bounded as the API bounds it.
func maxItems(form url.Values, name string, lo, hi, def int) (int, *apiError) {
	v := form.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, &apiError{"InvalidParameterValue", fmt.Sprintf("%s must be between %d and %d", name, lo, hi)}
	}
	return n, nil
}

// listParam reads a query list: prefix.1, prefix.2, ...
func listParam(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v...)
	}
}

// filter is a Describe filter: a name and the values any of which matches.
type filter struct {
	name   string
	values []string
}

// filters reads Describe filters; RDS names them Filters.Filter.N.Name and
// Filters.Filter.N.Values.Value.M, EC2 Filter.N.Name and Filter.N.Value.M.
func filters(form url.Values, prefix, valuesPrefix string) []filter {
	var out []filter
	for i := 1; ; i++ {
		p := prefix + "." + strconv.Itoa(i)
		name := form.Get(p + ".Name")
		if name == "" {
			return out
		}
		out = append(out, filter{name: name, values: listParam(form, p+"."+valuesPrefix)})
	}
}

// rdsTag is a Tag of an RDS TagList.
type rdsTag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type rdsEndpoint struct {
	Address      string `xml:"Address"`
	Port         int32  `xml:"Port"`
	HostedZoneID string `xml:"HostedZoneId"`
}

type rdsInstanceXML struct {
	DBInstanceIdentifier string       `xml:"DBInstanceIdentifier"`
	DBInstanceStatus     string       `xml:"DBInstanceStatus"`
	Engine               string       `xml:"Engine"`
	Endpoint             *rdsEndpoint `xml:"Endpoint,omitempty"`
	AvailabilityZone     string       `xml:"AvailabilityZone,omitempty"`
	DBClusterIdentifier  string       `xml:"DBClusterIdentifier,omitempty"`
	NetworkType          string       `xml:"NetworkType,omitempty"`
	DBInstanceArn        string       `xml:"DBInstanceArn"`
	TagList              []rdsTag     `xml:"TagList>Tag"`
}

type describeDBInstancesResponse struct {
	XMLName   xml.Name         `xml:"DescribeDBInstancesResponse"`
	Xmlns     string           `xml:"xmlns,attr"`
	Marker    string           `xml:"DescribeDBInstancesResult>Marker,omitempty"`
	Instances []rdsInstanceXML `xml:"DescribeDBInstancesResult>DBInstances>DBInstance"`
	RequestID string           `xml:"ResponseMetadata>RequestId"`
}

type rdsMemberXML struct {
	DBInstanceIdentifier string `xml:"DBInstanceIdentifier"`
	IsClusterWriter      bool   `xml:"IsClusterWriter"`
	PromotionTier        int    `xml:"PromotionTier"`
}

type rdsClusterXML struct {
	DBClusterIdentifier string         `xml:"DBClusterIdentifier"`
	Status              string         `xml:"Status"`
	Engine              string         `xml:"Engine"`
	Members             []rdsMemberXML `xml:"DBClusterMembers>DBClusterMember"`
	TagList             []rdsTag       `xml:"TagList>Tag"`
}

type describeDBClustersResponse struct {
	XMLName   xml.Name        `xml:"DescribeDBClustersResponse"`
	Xmlns     string          `xml:"xmlns,attr"`
	Marker    string          `xml:"DescribeDBClustersResult>Marker,omitempty"`
	Clusters  []rdsClusterXML `xml:"DescribeDBClustersResult>DBClusters>DBCluster"`
	RequestID string          `xml:"ResponseMetadata>RequestId"`
}

const rdsNamespace = "http://rds.amazonaws.com/doc/2014-10-31/"

// rdsFilterMatch tells whether the filters (db-cluster-id, db-instance-id)
// all match; an unknown filter is an error, as AWS says.
func rdsFilterMatch(fs []filter, instance, cluster string) (bool, *apiError) {
	for _, f := range fs {
		var v string
		switch f.name {
		case "db-instance-id":
			v = instance
		case "db-cluster-id":
			v = cluster
		default:
			return false, &apiError{"InvalidParameterValue", "Unrecognized filter name: " + f.name}
		}
		if !slices.Contains(f.values, v) {
			return false, nil
		}
	}
	return true, nil
}

// rdsPage selects the identifiers an RDS Describe call asks for, as AWS
// does: the one named by idField (NotFound when it does not exist), those
// the filters match (match gives an identifier's instance and cluster ids),
// one page of MaxRecords after Marker.
func (s *Server) rdsPage(form url.Values, action, idField string, all []string, notFound apiError,
	match func(id string) (instance, cluster string)) (ids []string, next string, aerr *apiError) {
	size, aerr := maxItems(form, "MaxRecords", 20, 100, 100)
	if aerr != nil {
		return nil, "", aerr
	}
	fs := filters(form, "Filters.Filter", "Values.Value")
	one := form.Get(idField)
	if one != "" && !slices.Contains(all, one) {
		notFound.msg = strings.ReplaceAll(notFound.msg, "%s", one)
		return nil, "", &notFound
	}
	for _, id := range all {
		instance, cluster := match(id)
		ok, aerr := rdsFilterMatch(fs, instance, cluster)
		if aerr != nil {
			return nil, "", aerr
		}
		if ok && (one == "" || one == id) {
			ids = append(ids, id)
		}
	}
	return page(ids, form.Get("Marker"), size, s.pageLimit, s.repeat[action])
}

// visible are the keys of m that sees lets the caller see, sorted.
func visible[V any](m map[string]V, sees func(string) bool) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(m)) {
		if sees(id) {
			out = append(out, id)
		}
	}
	return out
}

// rdsTags is a TagList, by key.
func rdsTags(tags map[string]string) []rdsTag {
	var out []rdsTag
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, rdsTag{Key: k, Value: tags[k]})
	}
	return out
}

func (s *Server) describeDBInstances(form url.Values, sees func(string) bool) (any, *apiError) {
	ids, next, aerr := s.rdsPage(form, DescribeDBInstances, "DBInstanceIdentifier", visible(s.instances, sees),
		apiError{"DBInstanceNotFound", "DBInstance %s not found."},
		func(id string) (string, string) { return id, s.instances[id].Cluster })
	if aerr != nil {
		return nil, aerr
	}
	resp := describeDBInstancesResponse{Xmlns: rdsNamespace, Marker: next, RequestID: requestID}
	for _, id := range ids {
		i := s.instances[id]
		x := rdsInstanceXML{
			DBInstanceIdentifier: i.Identifier, DBInstanceStatus: i.Status, Engine: "aurora-postgresql",
			AvailabilityZone: i.Zone, DBClusterIdentifier: i.Cluster, NetworkType: i.NetworkType,
			DBInstanceArn: "arn:aws:rds:eu-west-1:123456789012:db:" + i.Identifier,
		}
		if i.Address != "" {
			x.Endpoint = &rdsEndpoint{Address: i.Address, Port: i.Port, HostedZoneID: "Z29XKXDKYMONMX"}
		}
		x.TagList = rdsTags(i.Tags)
		resp.Instances = append(resp.Instances, x)
	}
	return resp, nil
}

func (s *Server) describeDBClusters(form url.Values, sees func(string) bool) (any, *apiError) {
	ids, next, aerr := s.rdsPage(form, DescribeDBClusters, "DBClusterIdentifier", visible(s.clusters, sees),
		apiError{"DBClusterNotFoundFault", "DBCluster %s not found."},
		func(id string) (string, string) { return "", id })
	if aerr != nil {
		return nil, aerr
	}
	resp := describeDBClustersResponse{Xmlns: rdsNamespace, Marker: next, RequestID: requestID}
	for _, id := range ids {
		c := s.clusters[id]
		x := rdsClusterXML{DBClusterIdentifier: c.Identifier, Status: c.Status, Engine: "aurora-postgresql", TagList: rdsTags(c.Tags)}
		for _, m := range c.Members {
			x.Members = append(x.Members, rdsMemberXML{DBInstanceIdentifier: m.Instance, IsClusterWriter: m.Writer, PromotionTier: 1})
		}
		resp.Clusters = append(resp.Clusters, x)
	}
	return resp, nil
}

type ec2Tag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type ec2State struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type ec2InstanceXML struct {
	InstanceID       string   `xml:"instanceId"`
	InstanceState    ec2State `xml:"instanceState"`
	PrivateIPAddress string   `xml:"privateIpAddress,omitempty"`
	IPAddress        string   `xml:"ipAddress,omitempty"`
	IPv6Address      string   `xml:"ipv6Address,omitempty"`
	Zone             string   `xml:"placement>availabilityZone"`
	TagSet           []ec2Tag `xml:"tagSet>item"`
}

type ec2Reservation struct {
	ReservationID string           `xml:"reservationId"`
	OwnerID       string           `xml:"ownerId"`
	Instances     []ec2InstanceXML `xml:"instancesSet>item"`
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []ec2Reservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

// ec2StateCodes are the instance state codes of the EC2 API reference.
var ec2StateCodes = map[string]int{
	"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80,
}

// ec2FilterMatch tells whether the filters (instance-id,
// instance-state-name, tag:<key>, tag-key) all match.
func ec2FilterMatch(fs []filter, i EC2Instance) (bool, *apiError) {
	for _, f := range fs {
		var ok bool
		switch key, isTag := strings.CutPrefix(f.name, "tag:"); {
		case isTag:
			v, has := i.Tags[key]
			ok = has && slices.Contains(f.values, v)
		case f.name == "tag-key":
			ok = slices.ContainsFunc(f.values, func(k string) bool { _, has := i.Tags[k]; return has })
		case f.name == "instance-id":
			ok = slices.Contains(f.values, i.ID)
		case f.name == "instance-state-name":
			ok = slices.Contains(f.values, i.State)
		default:
			return false, &apiError{"InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", f.name)}
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

func (s *Server) describeInstances(form url.Values, sees func(string) bool) (any, *apiError) {
	ids := listParam(form, "InstanceId")
	if len(ids) > 0 && form.Get("MaxResults") != "" {
		return nil, &apiError{"InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults"}
	}
	// Without MaxResults EC2 answers everything in one page.
	size, aerr := maxItems(form, "MaxResults", 5, 1000, len(s.ec2)+1)
	if aerr != nil {
		return nil, aerr
	}
	for _, id := range ids {
		if _, ok := s.ec2[id]; !ok || !sees(id) {
			return nil, &apiError{"InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id)}
		}
	}
	fs := filters(form, "Filter", "Value")
	var match []string
	for _, id := range visible(s.ec2, sees) {
		ok, aerr := ec2FilterMatch(fs, s.ec2[id])
		if aerr != nil {
			return nil, aerr
		}
		if ok && (len(ids) == 0 || slices.Contains(ids, id)) {
			match = append(match, id)
		}
	}
	match, next, aerr := page(match, form.Get("NextToken"), size, s.pageLimit, s.repeat[DescribeInstances])
	if aerr != nil {
		return nil, aerr
	}
	resp := describeInstancesResponse{Xmlns: "http://ec2.amazonaws.com/doc/2016-11-15/", RequestID: requestID, NextToken: next}
	// One reservation an instance, as instances launched one by one have.
	for _, id := range match {
		i := s.ec2[id]
		x := ec2InstanceXML{
			InstanceID: i.ID, InstanceState: ec2State{Code: ec2StateCodes[i.State], Name: i.State},
			PrivateIPAddress: i.PrivateIP, IPAddress: i.PublicIP, IPv6Address: i.IPv6, Zone: i.Zone,
		}
		for _, k := range slices.Sorted(maps.Keys(i.Tags)) {
			x.TagSet = append(x.TagSet, ec2Tag{Key: k, Value: i.Tags[k]})
		}
		resp.Reservations = append(resp.Reservations, ec2Reservation{
			ReservationID: "r-" + strings.TrimPrefix(i.ID, "i-"), OwnerID: "123456789012", Instances: []ec2InstanceXML{x},
		})
	}
	return resp, nil
}

type stsCredentials struct {
	AccessKeyID     string `xml:"AccessKeyId"`
	SecretAccessKey string `xml:"SecretAccessKey"`
	SessionToken    string `xml:"SessionToken"`
	Expiration      string `xml:"Expiration"`
}

type assumeRoleResponse struct {
	XMLName       xml.Name       `xml:"AssumeRoleResponse"`
	Xmlns         string         `xml:"xmlns,attr"`
	AssumedArn    string         `xml:"AssumeRoleResult>AssumedRoleUser>Arn"`
	AssumedRoleID string         `xml:"AssumeRoleResult>AssumedRoleUser>AssumedRoleId"`
	Credentials   stsCredentials `xml:"AssumeRoleResult>Credentials"`
	RequestID     string         `xml:"ResponseMetadata>RequestId"`
}

// sessionLifetime is how long assumed-role credentials last: AWS's default.
const sessionLifetime = time.Hour

// assumeRole answers the credentials of a role added with AddRole, and
// AccessDenied for any other, as AWS answers a role that does not exist or
// does not trust the caller.
func (s *Server) assumeRole(form url.Values) (any, *apiError) {
	role, session := form.Get("RoleArn"), form.Get("RoleSessionName")
	if role == "" || session == "" {
		return nil, &apiError{"ValidationError", "RoleArn and RoleSessionName are required"}
	}
	key, ok := s.roles[role]
	if !ok {
		return nil, &apiError{"AccessDenied", notAuthorized("sts:AssumeRole", role)}
	}
	name := role[strings.LastIndex(role, "/")+1:]
	s.sessions[key] = session
	return assumeRoleResponse{
		Xmlns:         "https://sts.amazonaws.com/doc/2011-06-15/",
		AssumedArn:    "arn:aws:sts::123456789012:assumed-role/" + name + "/" + session,
		AssumedRoleID: "AROAEXAMPLE:" + session,
		Credentials: stsCredentials{
			AccessKeyID: key, SecretAccessKey: "secret-" + key, SessionToken: "session-" + key,
			Expiration: time.Now().Add(sessionLifetime).UTC().Format(time.RFC3339),
		},
		RequestID: requestID,
	}, nil
}

type callerIdentityResponse struct {
	XMLName   xml.Name `xml:"GetCallerIdentityResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Arn       string   `xml:"GetCallerIdentityResult>Arn"`
	UserID    string   `xml:"GetCallerIdentityResult>UserId"`
	Account   string   `xml:"GetCallerIdentityResult>Account"`
	RequestID string   `xml:"ResponseMetadata>RequestId"`
}

// callerIdentity answers who signs with accessKey: the session of the role
// whose credentials sign with it (AddRole), else a user of the account
// 123456789012. STS answers it for any valid credentials: no policy can
// deny it. s.mu is held.
func (s *Server) callerIdentity(accessKey string) any {
	arn, user := "arn:aws:iam::123456789012:user/backendslice", "AIDAEXAMPLE"
	for role, key := range s.roles {
		if key == accessKey {
			account := strings.Split(role, ":")[4]
			arn = "arn:aws:sts::" + account + ":assumed-role/" + role[strings.LastIndex(role, "/")+1:] + "/" + s.sessions[key]
			user = "AROAEXAMPLE:" + s.sessions[key]
		}
	}
	return callerIdentityResponse{
		Xmlns: "https://sts.amazonaws.com/doc/2011-06-15/", Arn: arn, UserID: user,
		Account: strings.Split(arn, ":")[4], RequestID: requestID,
	}
}
