package helmtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/backendslice/backendslice/test/controlplane"
)

// DashboardFile is the Grafana dashboard the chart ships, from the
// repository root.
const DashboardFile = "charts/backendslice/dashboards/backendslice.json"

// Dashboard is the part of a Grafana dashboard the tests read.
type Dashboard struct {
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []Panel `json:"panels"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a dashboard panel; a row keeps the panels it collapses in Panels.
type Panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *DatasourceRef `json:"datasource"`
	Targets    []struct {
		RefID        string         `json:"refId"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Datasource   *DatasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// Variable is a template variable. Grafana stores a query variable's query
// as a string or as an object with a query field.
type Variable struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Query      any            `json:"query"`
	Datasource *DatasourceRef `json:"datasource"`
	// Current is the value the variable starts with.
	Current struct {
		Value any `json:"value"`
	} `json:"current"`
}

// DatasourceRef names the data source of a panel, a query or a variable.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// ReadDashboard reads the dashboard the chart ships, as bytes and parsed.
func ReadDashboard() ([]byte, Dashboard, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, Dashboard{}, err
	}
	data, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		return nil, Dashboard{}, err
	}
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, Dashboard{}, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	return data, d, nil
}

// AllPanels are the dashboard's panels, those collapsed in rows included.
func AllPanels(ps []Panel) []Panel {
	var out []Panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, AllPanels(p.Panels)...)
	}
	return out
}
