// Package grafana holds lockd's Grafana dashboards as code: the panels are
// written here, and `go generate` writes them as the JSON files next to
// this one (what operators import). The tests check that the JSON files are
// exactly what Dashboards makes, and evaluate every panel's query in a real
// Prometheus scraping a real lockd.
package grafana

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

//go:generate go run ./gen

// SchemaVersion is the Grafana dashboard schema the JSON is written in:
// Grafana 10.0's, so 10.0 and every later Grafana read it (a later one
// migrates it on load).
const SchemaVersion = 38

// Dashboard is one dashboard: its file name under deploy/grafana, the
// Grafana uid and title, and its panels in reading order.
type Dashboard struct {
	File, UID, Title, Description string
	// Namespace adds a "namespace" variable (label_values of
	// lockd_grants_total): panels filter on namespace="$namespace".
	Namespace bool
	Panels    []Panel
}

// Panel is a timeseries or stat panel over Prometheus targets.
type Panel struct {
	Stat               bool // a stat panel (an instant value) instead of a timeseries
	Title, Description string
	Unit               string
	Width              int // of 24 columns
	Targets            []Target
	// Thresholds are steps above a green base: a value at or above one is
	// drawn in its color (a line on a timeseries, the background of a stat).
	Thresholds []Threshold
	// Mappings name stat values ("0": "serving").
	Mappings map[string]Mapping
}

// Target is one query and its legend.
type Target struct{ Expr, Legend string }

// Threshold is one step.
type Threshold struct {
	Value float64
	Color string
}

// Mapping is the text and color a stat value is shown with.
type Mapping struct{ Text, Color string }

// panelHeight is every panel's height in grid rows.
const panelHeight = 8

// JSON is the dashboard as Grafana imports it: indented by two spaces,
// with a trailing newline, and fields in a fixed order.
func (d Dashboard) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // PromQL keeps its < and >
	enc.SetIndent("", "  ")
	if err := enc.Encode(d.model()); err != nil {
		return nil, fmt.Errorf("%s: %w", d.File, err)
	}
	return buf.Bytes(), nil
}

// datasource is the datasource every panel and query names: the
// dashboard's "datasource" variable, picked on import.
var datasource = jsonDatasource{Type: "prometheus", UID: "${datasource}"}

type jsonDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type jsonDashboard struct {
	Annotations          map[string][]any `json:"annotations"`
	Description          string           `json:"description"`
	Editable             bool             `json:"editable"`
	FiscalYearStartMonth int              `json:"fiscalYearStartMonth"`
	GraphTooltip         int              `json:"graphTooltip"`
	ID                   *int             `json:"id"`
	Links                []jsonLink       `json:"links"`
	Panels               []jsonPanel      `json:"panels"`
	Refresh              string           `json:"refresh"`
	SchemaVersion        int              `json:"schemaVersion"`
	Tags                 []string         `json:"tags"`
	Templating           jsonTemplating   `json:"templating"`
	Time                 jsonTime         `json:"time"`
	Timepicker           struct{}         `json:"timepicker"`
	Timezone             string           `json:"timezone"`
	Title                string           `json:"title"`
	UID                  string           `json:"uid"`
	Version              int              `json:"version"`
}

type jsonLink struct {
	AsDropdown  bool     `json:"asDropdown"`
	IncludeVars bool     `json:"includeVars"`
	KeepTime    bool     `json:"keepTime"`
	Tags        []string `json:"tags"`
	Title       string   `json:"title"`
	Type        string   `json:"type"`
}

type jsonTemplating struct {
	List []jsonVariable `json:"list"`
}

type jsonVariable struct {
	Current    struct{}        `json:"current"`
	Datasource *jsonDatasource `json:"datasource,omitempty"`
	Definition string          `json:"definition,omitempty"`
	Hide       int             `json:"hide"`
	IncludeAll bool            `json:"includeAll"`
	Label      string          `json:"label"`
	Multi      bool            `json:"multi"`
	Name       string          `json:"name"`
	Options    []any           `json:"options"`
	Query      string          `json:"query"`
	Refresh    int             `json:"refresh"`
	Regex      string          `json:"regex"`
	Sort       int             `json:"sort,omitempty"`
	Type       string          `json:"type"`
}

type jsonTime struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type jsonPanel struct {
	Datasource  jsonDatasource  `json:"datasource"`
	Description string          `json:"description"`
	FieldConfig jsonFieldConfig `json:"fieldConfig"`
	GridPos     jsonGridPos     `json:"gridPos"`
	ID          int             `json:"id"`
	Options     any             `json:"options"`
	Targets     []jsonTarget    `json:"targets"`
	Title       string          `json:"title"`
	Type        string          `json:"type"`
}

type jsonFieldConfig struct {
	Defaults  jsonDefaults `json:"defaults"`
	Overrides []any        `json:"overrides"`
}

type jsonDefaults struct {
	Color      map[string]string `json:"color"`
	Custom     map[string]any    `json:"custom,omitempty"`
	Mappings   []jsonMapping     `json:"mappings"`
	Min        *float64          `json:"min,omitempty"`
	Thresholds jsonThresholds    `json:"thresholds"`
	Unit       string            `json:"unit"`
}

type jsonMapping struct {
	Options map[string]jsonMappingResult `json:"options"`
	Type    string                       `json:"type"`
}

type jsonMappingResult struct {
	Color string `json:"color"`
	Index int    `json:"index"`
	Text  string `json:"text"`
}

type jsonThresholds struct {
	Mode  string     `json:"mode"`
	Steps []jsonStep `json:"steps"`
}

type jsonStep struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"` // null: the base step
}

type jsonGridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type jsonTarget struct {
	Datasource   jsonDatasource `json:"datasource"`
	EditorMode   string         `json:"editorMode"`
	Expr         string         `json:"expr"`
	Instant      bool           `json:"instant"`
	LegendFormat string         `json:"legendFormat"`
	Range        bool           `json:"range"`
	RefID        string         `json:"refId"`
}

// model lays the panels out left to right, wrapping at 24 columns.
func (d Dashboard) model() jsonDashboard {
	vars := []jsonVariable{{
		Label: "Data source", Name: "datasource", Query: "prometheus", Refresh: 1, Type: "datasource", Options: []any{},
	}}
	if d.Namespace {
		q := "label_values(lockd_grants_total, namespace)"
		ds := datasource
		vars = append(vars, jsonVariable{
			Datasource: &ds, Definition: q, Label: "Namespace", Name: "namespace", Query: q,
			Refresh: 2, Sort: 1, Type: "query", Options: []any{},
		})
	}
	out := jsonDashboard{
		Annotations:   map[string][]any{"list": {}},
		Description:   d.Description,
		Editable:      true,
		GraphTooltip:  1, // shared crosshair
		Links:         []jsonLink{{IncludeVars: true, KeepTime: true, Tags: []string{"lockd"}, Title: "lockd dashboards", Type: "dashboards"}},
		Refresh:       "30s",
		SchemaVersion: SchemaVersion,
		Tags:          []string{"lockd"},
		Templating:    jsonTemplating{List: vars},
		Time:          jsonTime{From: "now-3h", To: "now"},
		Title:         d.Title,
		UID:           d.UID,
		Version:       1,
	}
	x, y, rowH := 0, 0, 0
	for i, p := range d.Panels {
		w := p.Width
		if x+w > 24 {
			x, y = 0, y+rowH
		}
		out.Panels = append(out.Panels, p.model(i+1, jsonGridPos{H: panelHeight, W: w, X: x, Y: y}))
		x, rowH = x+w, panelHeight
	}
	return out
}

func (p Panel) model(id int, pos jsonGridPos) jsonPanel {
	zero := 0.0
	steps := []jsonStep{{Color: "green"}}
	for _, t := range p.Thresholds {
		v := t.Value
		steps = append(steps, jsonStep{Color: t.Color, Value: &v})
	}
	defaults := jsonDefaults{
		Color:      map[string]string{"mode": "palette-classic"},
		Mappings:   []jsonMapping{},
		Min:        &zero,
		Thresholds: jsonThresholds{Mode: "absolute", Steps: steps},
		Unit:       p.Unit,
	}
	jp := jsonPanel{Datasource: datasource, Description: p.Description, GridPos: pos, ID: id, Title: p.Title}
	if p.Stat {
		jp.Type = "stat"
		defaults.Color = map[string]string{"mode": "thresholds"}
		if len(p.Mappings) > 0 {
			m := jsonMapping{Type: "value", Options: map[string]jsonMappingResult{}}
			i := 0
			for _, v := range slices.Sorted(maps.Keys(p.Mappings)) {
				m.Options[v] = jsonMappingResult{Color: p.Mappings[v].Color, Index: i, Text: p.Mappings[v].Text}
				i++
			}
			defaults.Mappings = []jsonMapping{m}
		}
		jp.Options = map[string]any{
			"colorMode":     "background",
			"graphMode":     "none",
			"justifyMode":   "auto",
			"orientation":   "auto",
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"textMode":      "auto",
		}
	} else {
		jp.Type = "timeseries"
		thresholdsStyle := "off"
		if len(p.Thresholds) > 0 {
			thresholdsStyle = "line"
		}
		defaults.Custom = map[string]any{
			"drawStyle":       "line",
			"fillOpacity":     10,
			"lineWidth":       1,
			"showPoints":      "never",
			"spanNulls":       false,
			"thresholdsStyle": map[string]string{"mode": thresholdsStyle},
		}
		jp.Options = map[string]any{
			"legend":  map[string]any{"calcs": []string{}, "displayMode": "list", "placement": "bottom", "showLegend": true},
			"tooltip": map[string]string{"mode": "multi", "sort": "desc"},
		}
	}
	jp.FieldConfig = jsonFieldConfig{Defaults: defaults, Overrides: []any{}}
	for i, t := range p.Targets {
		jp.Targets = append(jp.Targets, jsonTarget{
			Datasource: datasource, EditorMode: "code", Expr: t.Expr, LegendFormat: t.Legend,
			Instant: p.Stat, Range: !p.Stat, RefID: string(rune('A' + i)),
		})
	}
	return jp
}
