package grafana_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/deploy/grafana"
)

// The dashboards as the JSON files say, read with only the fields the
// checks need.
type fileDashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	Description   string `json:"description"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []fileVariable `json:"list"`
	} `json:"templating"`
	Panels []filePanel `json:"panels"`
}

type fileVariable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      string          `json:"query"`
	Datasource *fileDatasource `json:"datasource"`
}

type fileDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type filePanel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Datasource  *fileDatasource `json:"datasource"`
	GridPos     *struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	} `json:"gridPos"`
	Targets []fileTarget `json:"targets"`
}

type fileTarget struct {
	RefID      string          `json:"refId"`
	Expr       string          `json:"expr"`
	Datasource *fileDatasource `json:"datasource"`
}

// loadDashboards parses every JSON file under this directory, by path.
func loadDashboards(t *testing.T) map[string]fileDashboard {
	t.Helper()
	out := map[string]fileDashboard{}
	err := filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var d fileDashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out[path] = d
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no dashboards (*.json) under deploy/grafana")
	}
	return out
}

// TestDashboardFilesAreGenerated: each JSON file is exactly what
// grafana.Dashboards makes (so `go generate ./deploy/grafana/` was run after
// the last change), and no JSON file is left that it does not make.
func TestDashboardFilesAreGenerated(t *testing.T) {
	made := map[string]bool{}
	for _, d := range grafana.Dashboards() {
		made[d.File] = true
		want, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(d.File)
		if err != nil {
			t.Errorf("%s: %v (run go generate ./deploy/grafana/)", d.File, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what grafana.Dashboards makes: run go generate ./deploy/grafana/ (never edit the JSON by hand)", d.File)
		}
	}
	for path := range loadDashboards(t) {
		if !made[path] {
			t.Errorf("%s is not made by grafana.Dashboards: add it there or remove it", path)
		}
	}
}

// builtins are the Grafana variables a query may use without defining them.
var builtins = map[string]bool{"__rate_interval": true, "__range": true, "__interval": true}

var varRef = regexp.MustCompile(`\$\{?(\w+)\}?`)

// TestDashboardStructure checks what Grafana needs to import a dashboard
// and show every panel, and what an operator needs to read it.
func TestDashboardStructure(t *testing.T) {
	uids := map[string]string{}
	for path, d := range loadDashboards(t) {
		t.Run(path, func(t *testing.T) {
			if d.Title == "" || d.UID == "" || d.Description == "" {
				t.Errorf("title %q, uid %q, description %q: all are required", d.Title, d.UID, d.Description)
			}
			if len(d.UID) > 40 {
				t.Errorf("uid %q is longer than Grafana's 40 characters", d.UID)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q is also %s's", d.UID, other)
			}
			uids[d.UID] = path
			if d.SchemaVersion < 36 {
				t.Errorf("schemaVersion %d, want >= 36", d.SchemaVersion)
			}
			vars := map[string]fileVariable{}
			for _, v := range d.Templating.List {
				vars[v.Name] = v
			}
			if ds := vars["datasource"]; ds.Type != "datasource" || ds.Query != "prometheus" {
				t.Errorf("no datasource variable of type datasource, query prometheus: %+v", ds)
			}
			for name, v := range vars {
				if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}" || v.Query == "") {
					t.Errorf("variable %s: a query on ${datasource} is required: %+v", name, v)
				}
			}
			if len(d.Panels) == 0 {
				t.Fatal("no panels")
			}
			ids := map[int]bool{}
			var cells [24][256]string // grid cells taken, by panel title
			for _, p := range d.Panels {
				where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
				if p.Title == "" || ids[p.ID] || p.ID <= 0 {
					t.Errorf("%s: a title and a unique positive id are required", where)
				}
				ids[p.ID] = true
				if p.Type != "timeseries" && p.Type != "stat" {
					t.Errorf("%s: type %q, want timeseries or stat", where, p.Type)
				}
				// One sentence saying how to read it.
				if !strings.HasSuffix(p.Description, ".") || strings.Count(strings.TrimSuffix(p.Description, "."), ". ") > 0 {
					t.Errorf("%s: description %q: want one sentence", where, p.Description)
				}
				if p.Datasource == nil || *p.Datasource != (fileDatasource{Type: "prometheus", UID: "${datasource}"}) {
					t.Errorf("%s: datasource %+v, want prometheus ${datasource}", where, p.Datasource)
				}
				g := p.GridPos
				if g == nil || g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 || g.Y+g.H > len(cells[0]) {
					t.Errorf("%s: gridPos %+v is not within 24 columns", where, g)
				} else {
					for x := g.X; x < g.X+g.W; x++ {
						for y := g.Y; y < g.Y+g.H; y++ {
							if cells[x][y] != "" {
								t.Errorf("%s overlaps %q at column %d row %d", where, cells[x][y], x, y)
							}
							cells[x][y] = p.Title
						}
					}
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: no targets", where)
				}
				refs := map[string]bool{}
				for _, tg := range p.Targets {
					if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" || refs[tg.RefID] {
						t.Errorf("%s: target %q: a non-empty expr and a unique refId are required", where, tg.RefID)
					}
					refs[tg.RefID] = true
					if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
						t.Errorf("%s: target %s: datasource %+v, want ${datasource}", where, tg.RefID, tg.Datasource)
					}
					for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
						if _, ok := vars[m[1]]; !ok && !builtins[m[1]] {
							t.Errorf("%s: target %s uses $%s, which the dashboard does not define", where, tg.RefID, m[1])
						}
					}
				}
			}
		})
	}
}
