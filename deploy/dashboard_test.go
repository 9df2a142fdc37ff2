package deploy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Datasource *ref   `json:"datasource"`
			Query      any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name       string `json:"name"`
			Datasource *ref   `json:"datasource"`
			Expr       string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	raw string
}

// ref is a panel's or a query's data source.
type ref struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int       `json:"id"`
	Type       string    `json:"type"`
	Title      string    `json:"title"`
	Datasource *ref      `json:"datasource"`
	GridPos    *struct{} `json:"gridPos"`
	Targets    []struct {
		Expr       string `json:"expr"`
		RefID      string `json:"refId"`
		Datasource *ref   `json:"datasource"`
	} `json:"targets"`
	// Panels are a collapsed row's.
	Panels []panel `json:"panels"`
}

func readDashboard(t *testing.T) *dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/prefix-cache.json")
	if err != nil {
		t.Fatal(err)
	}
	d := &dashboard{raw: string(b)}
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatalf("grafana/prefix-cache.json: %v", err)
	}
	return d
}

// all returns every panel but rows, those of collapsed rows included.
func (d *dashboard) all() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// panel returns the panel titled title; it must have a query.
func (d *dashboard) panel(t *testing.T, title string) panel {
	t.Helper()
	for _, p := range d.all() {
		if p.Title == title && len(p.Targets) > 0 {
			return p
		}
	}
	t.Fatalf("the dashboard has no panel %q with a query", title)
	return panel{}
}

// jobSelector is how every query of the dashboard keeps to the tier the
// operator picked.
const jobSelector = `job="$job"`

// The dashboard's shape, without Grafana or Prometheus: every panel but
// a row has a query, every query reads the data source the operator
// picks and keeps to the tier of the $job variable (a query without it
// would mix every tier's series), panel ids are unique, and the $job
// variable lists the jobs that export the module's metrics.
// TestOperatorsView runs the queries.
func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	panels := d.all()
	if len(panels) == 0 {
		t.Fatal("grafana/prefix-cache.json: no panel")
	}
	ids := map[int]string{}
	for _, p := range panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos == nil {
			t.Errorf("panel %q: no gridPos", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			switch {
			case strings.TrimSpace(tg.Expr) == "":
				t.Errorf("panel %q: query %s is empty", p.Title, tg.RefID)
			case !strings.Contains(tg.Expr, jobSelector):
				t.Errorf("panel %q: %s does not select %s", p.Title, tg.Expr, jobSelector)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: query refId %q missing or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: query %s's data source %v, want the ${datasource} variable", p.Title, tg.RefID, tg.Datasource)
			}
		}
	}
	for _, a := range d.Annotations.List {
		if !strings.Contains(a.Expr, jobSelector) {
			t.Errorf("annotation %q: %s does not select %s", a.Name, a.Expr, jobSelector)
		}
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		q, _ := json.Marshal(v.Query)
		vars[v.Name] = v.Type + " " + string(q)
	}
	if !strings.HasPrefix(vars["datasource"], "datasource ") || !strings.Contains(vars["datasource"], "prometheus") {
		t.Errorf("no Prometheus data source variable: %q", vars["datasource"])
	}
	if !strings.Contains(vars["job"], "label_values(caddy_prefix_cache_") {
		t.Errorf("the job variable does not list the jobs of caddy_prefix_cache_ series: %q", vars["job"])
	}
}
