package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// tableAccept asks the API server for the Table kubectl prints, as
// `kubectl get` does.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// TestPrinterColumns reads ExternalBackends as `kubectl get xb -o wide`
// does, as a Table the API server builds from the CRD's printer columns:
// ENDPOINTS shows the ready endpoints of those published, 2/2, then 1/2
// while one of the two drains.
func TestPrinterColumns(t *testing.T) {
	xb, _ := readyBackend(t, []string{"192.0.2.10", "192.0.2.11"}, withDrainPeriod("1h"))
	want := map[string]any{"Service": "db", "Endpoints": "2/2", "Ready": "True", "Reason": v1alpha1.ReasonReady}
	eventually(t, timeout, "kubectl get showing "+fmt.Sprint(want), func() error { return rowIs(t, xb, want) })

	mustUpdate(t, xb, withAddresses("192.0.2.10"))
	waitStatus(t, xb, "192.0.2.11 draining", func(xb *v1alpha1.ExternalBackend) error {
		if c := xb.Status.Endpoints; c.Total != 2 || c.Terminating != 1 {
			return fmt.Errorf("endpoints %+v, want 2 with 1 terminating", c)
		}
		return nil
	})
	want["Endpoints"] = "1/2"
	if err := rowIs(t, xb, want); err != nil {
		t.Error(err)
	}
}

// rowIs reads the table of xb's namespace and checks that xb's row has the
// wanted cells, by column name, and that every column kubectl shows is
// there (Reason only with -o wide: priority 1).
func rowIs(t *testing.T, xb *v1alpha1.ExternalBackend, want map[string]any) error {
	t.Helper()
	table := getTable(t, "/apis/"+v1alpha1.GroupVersion.String()+"/namespaces/"+xb.Namespace+"/externalbackends")
	names := make([]string, len(table.ColumnDefinitions))
	for i, c := range table.ColumnDefinitions {
		names[i] = c.Name
		if wide := c.Name == "Reason"; wide != (c.Priority == 1) {
			t.Errorf("column %s has priority %d", c.Name, c.Priority)
		}
	}
	if fmt.Sprint(names) != "[Name Service Endpoints Ready Reason Age]" {
		t.Errorf("columns %v", names)
	}
	for _, row := range table.Rows {
		if row.Cells[0] != xb.Name {
			continue
		}
		for i, name := range names {
			if w, ok := want[name]; ok && row.Cells[i] != w {
				return fmt.Errorf("%s is %v, want %v (row %v)", name, row.Cells[i], w, row.Cells)
			}
		}
		return nil
	}
	return fmt.Errorf("no row for %s in %+v", xb.Name, table.Rows)
}

// getTable GETs path from the API server as a Table.
func getTable(t *testing.T, path string) *metav1.Table {
	t.Helper()
	cfg := framework.E().Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", tableAccept)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s as a Table: %s %v: %s", req.URL, resp.Status, err, body)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(body, table); err != nil {
		t.Fatal(err)
	}
	if table.Kind != "Table" {
		t.Fatalf("GET %s answered a %s, want a Table", path, table.Kind)
	}
	return table
}
