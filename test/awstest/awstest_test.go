package awstest

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// signed is an Authorization header of the SigV4 shape for service.
func signed(service string) string { return signedBy("AKIDEXAMPLE", service) }

// signedBy is an Authorization header of the SigV4 shape for service,
// signed with accessKey.
func signedBy(accessKey, service string) string {
	return "AWS4-HMAC-SHA256 Credential=" + accessKey + "/20260101/eu-west-1/" + service +
		"/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + strings.Repeat("a", 64)
}

// post sends a form to the fake and returns the status and body.
func post(t *testing.T, s *Server, auth string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func wantBody(t *testing.T, what, body string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(body, p) {
			t.Errorf("%s: body %s does not contain %s", what, body, p)
		}
	}
}

func TestUnsignedAndMisscopedRequestsAreRefused(t *testing.T) {
	s := New()
	defer s.Close()
	form := url.Values{"Action": {DescribeDBInstances}, "Version": {rdsVersion}}
	code, body := post(t, s, "", form)
	if code != http.StatusForbidden {
		t.Errorf("unsigned: status %d, want 403", code)
	}
	wantBody(t, "unsigned", body, "<ErrorResponse>", "<Type>Sender</Type>", "<Code>IncompleteSignature</Code>", "<RequestId>")
	code, body = post(t, s, signed("ec2"), form)
	if code != http.StatusForbidden {
		t.Errorf("signed for ec2: status %d, want 403", code)
	}
	wantBody(t, "signed for ec2", body, "<Code>InvalidSignatureException</Code>")
	if s.Calls(DescribeDBInstances) != 2 {
		t.Errorf("calls = %d, want 2 counted", s.Calls(DescribeDBInstances))
	}
}

func TestErrorShapes(t *testing.T) {
	s := New()
	defer s.Close()
	s.Fail(DescribeInstances, "RequestLimitExceeded", 1)
	code, body := post(t, s, signed("ec2"), url.Values{"Action": {DescribeInstances}, "Version": {ec2Version}})
	if code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", code)
	}
	wantBody(t, "ec2 throttling", body, "<Response><Errors><Error><Code>RequestLimitExceeded</Code>", "<RequestID>")
	code, body = post(t, s, signed("ec2"), url.Values{"Action": {DescribeInstances}, "Version": {ec2Version}, "InstanceId.1": {"i-none"}})
	if code != http.StatusBadRequest {
		t.Errorf("status %d, want 400", code)
	}
	wantBody(t, "unknown instance", body, "<Code>InvalidInstanceID.NotFound</Code>")
	_, body = post(t, s, signed("rds"), url.Values{"Action": {DescribeDBInstances}, "Version": {rdsVersion}, "DBInstanceIdentifier": {"none"}})
	wantBody(t, "unknown DB instance", body, "<Code>DBInstanceNotFound</Code>")
}

func TestFiltersAndMarkers(t *testing.T) {
	s := New()
	defer s.Close()
	for _, id := range []string{"a", "b", "c"} {
		s.PutDBInstance(DBInstance{Identifier: id, Status: "available", Cluster: "c1"})
	}
	s.PutDBInstance(DBInstance{Identifier: "d", Status: "available", Cluster: "c2"})
	s.SetPageLimit(2)
	form := url.Values{
		"Action": {DescribeDBInstances}, "Version": {rdsVersion},
		"Filters.Filter.1.Name": {"db-cluster-id"}, "Filters.Filter.1.Values.Value.1": {"c1"},
	}
	_, body := post(t, s, signed("rds"), form)
	wantBody(t, "page 1", body, "<DBInstanceIdentifier>a</DBInstanceIdentifier>", "<DBInstanceIdentifier>b</DBInstanceIdentifier>", "<Marker>2</Marker>")
	form.Set("Marker", "2")
	_, body = post(t, s, signed("rds"), form)
	wantBody(t, "page 2", body, "<DBInstanceIdentifier>c</DBInstanceIdentifier>")
	if strings.Contains(body, "<Marker>") || strings.Contains(body, "<DBInstanceIdentifier>d<") {
		t.Errorf("page 2: %s; want c only and no marker", body)
	}
}

func TestRepeatToken(t *testing.T) {
	s := New()
	defer s.Close()
	for _, id := range []string{"a", "b", "c"} {
		s.PutDBInstance(DBInstance{Identifier: id, Status: "available"})
		s.PutEC2Instance(EC2Instance{ID: "i-" + id, State: "running"})
	}
	s.SetPageLimit(2)
	s.RepeatToken(DescribeDBInstances)
	s.RepeatToken(DescribeInstances)
	rdsForm := url.Values{"Action": {DescribeDBInstances}, "Version": {rdsVersion}}
	ec2Form := url.Values{"Action": {DescribeInstances}, "Version": {ec2Version}, "MaxResults": {"5"}}

	// The first page, asked for without a token, ends as usual.
	_, body := post(t, s, signed("rds"), rdsForm)
	wantBody(t, "rds page 1", body, "<Marker>2</Marker>")
	_, body = post(t, s, signed("ec2"), ec2Form)
	wantBody(t, "ec2 page 1", body, "<nextToken>2</nextToken>")

	// Every later page hands back the token it was asked with, also past
	// the last item.
	rdsForm.Set("Marker", "2")
	ec2Form.Set("NextToken", "2")
	for n := range 3 {
		_, body = post(t, s, signed("rds"), rdsForm)
		wantBody(t, fmt.Sprintf("rds repeat %d", n), body, "<DBInstanceIdentifier>c</DBInstanceIdentifier>", "<Marker>2</Marker>")
		_, body = post(t, s, signed("ec2"), ec2Form)
		wantBody(t, fmt.Sprintf("ec2 repeat %d", n), body, "<instanceId>i-c</instanceId>", "<nextToken>2</nextToken>")
	}

	s.ClearFaults()
	_, body = post(t, s, signed("rds"), rdsForm)
	_, ec2Body := post(t, s, signed("ec2"), ec2Form)
	if strings.Contains(body, "<Marker>") || strings.Contains(ec2Body, "<nextToken>") {
		t.Errorf("after ClearFaults the last pages still carry a token: %s %s", body, ec2Body)
	}
}

func TestStall(t *testing.T) {
	s := New()
	defer s.Close()
	release := s.Stall(DescribeDBInstances)
	defer release()
	req, err := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(url.Values{"Action": {DescribeDBInstances}, "Version": {rdsVersion}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", signed("rds"))
	// post fails the test, which only the test's goroutine may do.
	done := make(chan string)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			done <- err.Error()
			return
		}
		done <- string(body)
	}()
	// Other actions answer meanwhile.
	if code, _ := post(t, s, signed("ec2"), url.Values{"Action": {DescribeInstances}, "Version": {ec2Version}}); code != http.StatusOK {
		t.Errorf("DescribeInstances during the stall: status %d", code)
	}
	select {
	case body := <-done:
		t.Fatalf("a stalled request answered before release: %s", body)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	wantBody(t, "after release", <-done, "<DescribeDBInstancesResponse")
	if got := s.Calls(DescribeDBInstances); got != 1 {
		t.Errorf("calls = %d, want 1", got)
	}
}

func TestAssumeRole(t *testing.T) {
	s := New()
	defer s.Close()
	const role = "arn:aws:iam::210987654321:role/reader"
	s.AddRole(role, "ASIAREADER")
	form := url.Values{"Action": {AssumeRole}, "Version": {stsVersion}, "RoleArn": {role}, "RoleSessionName": {"backendslice"}}
	code, body := post(t, s, signedBy("AKIDCONTROLLER", "sts"), form)
	if code != http.StatusOK {
		t.Errorf("known role: status %d, want 200", code)
	}
	wantBody(t, "known role", body, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">`,
		"<Arn>arn:aws:sts::123456789012:assumed-role/reader/backendslice</Arn>",
		"<AccessKeyId>ASIAREADER</AccessKeyId>", "<SecretAccessKey>", "<SessionToken>", "<Expiration>")

	form.Set("RoleArn", "arn:aws:iam::210987654321:role/unknown")
	code, body = post(t, s, signedBy("AKIDCONTROLLER", "sts"), form)
	if code != http.StatusForbidden {
		t.Errorf("unknown role: status %d, want 403", code)
	}
	wantBody(t, "unknown role", body, "<ErrorResponse>", "<Code>AccessDenied</Code>",
		"not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::210987654321:role/unknown")
	if n := s.CallsBy(AssumeRole, "AKIDCONTROLLER"); n != 2 {
		t.Errorf("CallsBy(AssumeRole, AKIDCONTROLLER) = %d, want 2", n)
	}
}

func TestAccounts(t *testing.T) {
	s := New()
	defer s.Close()
	for _, id := range []string{"a", "b"} {
		s.PutDBInstance(DBInstance{Identifier: "db-" + id, Status: "available"})
		s.PutDBCluster(DBCluster{Identifier: "cluster-" + id, Status: "available", Tags: map[string]string{"team": id}})
		s.PutEC2Instance(EC2Instance{ID: "i-" + id, State: "running"})
	}
	s.SetAccount("ASIAA", "db-a", "cluster-a", "i-a")
	ask := func(key, service, action, version string, extra ...string) string {
		t.Helper()
		form := url.Values{"Action": {action}, "Version": {version}}
		for i := 0; i < len(extra); i += 2 {
			form.Set(extra[i], extra[i+1])
		}
		_, body := post(t, s, signedBy(key, service), form)
		return body
	}
	for _, c := range []struct {
		key, service, action, version string
		see, miss                     []string
	}{
		{"ASIAA", "rds", DescribeDBInstances, rdsVersion, []string{"<DBInstanceIdentifier>db-a<"}, []string{"db-b"}},
		{"ASIAA", "rds", DescribeDBClusters, rdsVersion, []string{"<DBClusterIdentifier>cluster-a<", "<Key>team</Key><Value>a</Value>"}, []string{"cluster-b"}},
		{"ASIAA", "ec2", DescribeInstances, ec2Version, []string{"<instanceId>i-a<"}, []string{"i-b"}},
		// A key without an account sees everything.
		{"AKIDEXAMPLE", "rds", DescribeDBInstances, rdsVersion, []string{"db-a", "db-b"}, nil},
	} {
		body := ask(c.key, c.service, c.action, c.version)
		wantBody(t, c.key+" "+c.action, body, c.see...)
		for _, m := range c.miss {
			if strings.Contains(body, m) {
				t.Errorf("%s %s: sees %s, outside its account: %s", c.key, c.action, m, body)
			}
		}
	}
	// Naming an instance of another account is as naming none that exists.
	wantBody(t, "other account's instance", ask("ASIAA", "ec2", DescribeInstances, ec2Version, "InstanceId.1", "i-b"),
		"<Code>InvalidInstanceID.NotFound</Code>")
	if n, other := s.CallsBy(DescribeDBInstances, "ASIAA"), s.CallsBy(DescribeDBInstances, "AKIDEXAMPLE"); n != 1 || other != 1 {
		t.Errorf("DescribeDBInstances by ASIAA = %d and by AKIDEXAMPLE = %d, want 1 each", n, other)
	}
}

func TestGetCallerIdentity(t *testing.T) {
	s := New()
	defer s.Close()
	const role = "arn:aws:iam::210987654321:role/reader"
	s.AddRole(role, "ASIAREADER")
	who := url.Values{"Action": {GetCallerIdentity}, "Version": {stsVersion}}
	code, body := post(t, s, signedBy("AKIDCONTROLLER", "sts"), who)
	if code != http.StatusOK {
		t.Errorf("the controller's key: status %d, want 200", code)
	}
	wantBody(t, "the controller's key", body, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">`,
		"<Arn>arn:aws:iam::123456789012:user/backendslice</Arn>", "<Account>123456789012</Account>", "<RequestId>")

	assume := url.Values{"Action": {AssumeRole}, "Version": {stsVersion}, "RoleArn": {role}, "RoleSessionName": {"checker"}}
	if code, body := post(t, s, signedBy("AKIDCONTROLLER", "sts"), assume); code != http.StatusOK {
		t.Fatalf("AssumeRole: %d %s", code, body)
	}
	_, body = post(t, s, signedBy("ASIAREADER", "sts"), who)
	wantBody(t, "the role's key", body, "<Arn>arn:aws:sts::210987654321:assumed-role/reader/checker</Arn>",
		"<Account>210987654321</Account>", "<UserId>AROAEXAMPLE:checker</UserId>")

	s.Fail(GetCallerIdentity, "AccessDenied", 1)
	code, body = post(t, s, signedBy("ASIAREADER", "sts"), who)
	if code != http.StatusForbidden {
		t.Errorf("injected fault: status %d, want 403", code)
	}
	wantBody(t, "injected fault", body, "<ErrorResponse>", "<Code>AccessDenied</Code>")
	code, body = post(t, s, signedBy("ASIAREADER", "rds"), who)
	if code != http.StatusForbidden {
		t.Errorf("signed for rds: status %d, want 403", code)
	}
	wantBody(t, "signed for rds", body, "<Code>InvalidSignatureException</Code>")
	if n := s.CallsBy(GetCallerIdentity, "ASIAREADER"); n != 3 {
		t.Errorf("CallsBy(GetCallerIdentity, ASIAREADER) = %d, want 3", n)
	}
}

// postJSON sends a MemoryDB call (JSON 1.1, named by X-Amz-Target) to the
// fake and returns the status, the error type header and the body.
func postJSON(t *testing.T, s *Server, auth, target, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", target)
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), string(out)
}

func TestMemoryDBJSONProtocol(t *testing.T) {
	s := New()
	defer s.Close()
	s.PutMemoryDBCluster(MemoryDBCluster{Name: "ledger", Status: "available", Shards: []MemoryDBShard{{Name: "0001",
		Nodes: []MemoryDBNode{{Name: "ledger-0001-001", Status: "available", Address: "n1.example", Port: 6379}}}}})
	code, _, body := postJSON(t, s, signed("memorydb"), "AmazonMemoryDB.DescribeClusters", `{"ShowShardDetails":true}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	wantBody(t, "clusters", body, `"Name":"ledger"`, `"Shards":[{"Name":"0001"`, `"Endpoint":{"Address":"n1.example","Port":6379}`)
	code, _, body = postJSON(t, s, signed("memorydb"), "AmazonMemoryDB.DescribeClusters", `{}`)
	if code != http.StatusOK || strings.Contains(body, `"Shards":`) {
		t.Errorf("without ShowShardDetails: status %d, body %s; want no shards, as AWS", code, body)
	}

	code, typ, body := postJSON(t, s, signed("elasticache"), "AmazonMemoryDB.DescribeClusters", `{}`)
	if code != http.StatusForbidden || typ != "InvalidSignatureException" {
		t.Errorf("signed for elasticache: status %d, type %q", code, typ)
	}
	wantBody(t, "misscoped", body, `"__type":"InvalidSignatureException"`, `"message":`)
	s.Fail(DescribeClusters, "ThrottlingException", 1)
	if code, typ, _ := postJSON(t, s, signed("memorydb"), "AmazonMemoryDB.DescribeClusters", `{}`); code != http.StatusBadRequest || typ != "ThrottlingException" {
		t.Errorf("throttled: status %d, type %q", code, typ)
	}
	if code, typ, _ := postJSON(t, s, signed("memorydb"), "AmazonMemoryDB.DescribeClusters", `{"MaxResults":0}`); code != http.StatusBadRequest || typ != "InvalidParameterValueException" {
		t.Errorf("MaxResults 0: status %d, type %q", code, typ)
	}
	if s.Calls(DescribeClusters) != 5 {
		t.Errorf("calls = %d, want 5 counted", s.Calls(DescribeClusters))
	}
}
