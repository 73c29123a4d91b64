package deploy_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// The monitoring files (monitoring/): the Prometheus rule files, the Grafana dashboard and
// their rendering as a PrometheusRule under kubernetes/base. Here, without a gateway:
//   - each rule file decodes strictly into the Prometheus Operator's PrometheusRuleSpec (a rule
//     file's groups are that spec), every expression parses with Prometheus' own PromQL parser,
//     and every alert has a severity, a summary, a description and a runbook;
//   - promtool check rules and promtool test rules (the alerts' unit tests) pass;
//   - kubernetes/base/prometheusrule.yaml holds exactly the rule files' groups;
//   - the dashboard decodes strictly into the Grafana Foundation SDK's types, every query uses
//     the datasource variable and only variables that exist, and parses once they are filled in;
//   - docs/deploy.md's alert table lists each alert with its severity.
// monitoring_gateway_test.go checks the same queries against a running gateway and a real
// Prometheus server. Adding a panel or a rule needs no change here.

var updatePrometheusRule = flag.Bool("update", false, "rewrite kubernetes/base/prometheusrule.yaml from monitoring/*.yaml")

const (
	dashboardFile      = "monitoring/grafana-dashboard.json"
	prometheusRuleFile = "kubernetes/base/prometheusrule.yaml"
)

// requireTool finds a program the checks need: missing, the test is skipped, but not in CI
// (CI=true), where scripts/setup.sh test has installed it.
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		msg := fmt.Sprintf("%s is not installed (Debian package %s; scripts/setup.sh test installs it)", name, pkg)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

type ruleFile struct {
	path string
	spec monitoringv1.PrometheusRuleSpec
}

// readRuleFiles decodes every monitoring/*.yaml strictly: unknown or misspelt keys are errors.
func readRuleFiles(t *testing.T) []ruleFile {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join("monitoring", "*.yaml"))
	if len(paths) < 2 {
		t.Fatalf("monitoring/ holds %d rule files, want the recording and the alerting rules", len(paths))
	}
	var files []ruleFile
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var spec monitoringv1.PrometheusRuleSpec
		if err := strictYAML(data, &spec); err != nil {
			t.Fatalf("%s, decoded strictly as rule groups (the Prometheus Operator's PrometheusRuleSpec): %v", p, err)
		}
		files = append(files, ruleFile{p, spec})
	}
	return files
}

// recordedNames returns the names the recording rules write.
func recordedNames(files []ruleFile) map[string]bool {
	names := map[string]bool{}
	for _, f := range files {
		for _, g := range f.spec.Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					names[r.Record] = true
				}
			}
		}
	}
	return names
}

var promqlParser = parser.NewParser(parser.Options{})

// query is one PromQL expression of a rule file or of the dashboard.
type query struct {
	where  string // for messages: the file and the rule, or the panel and the target
	expr   string // as Prometheus receives it (a dashboard's variables filled in)
	ast    parser.Expr
	alert  bool   // an alert's condition: empty unless it fires
	legend string // a panel target's legendFormat
	// wild are the labels whose matchers hold a dashboard variable (with "All" selected they
	// match anything).
	wild map[string]bool
}

// ruleQueries returns every rule's expression, parsed; a parse error fails the test.
func ruleQueries(t *testing.T, files []ruleFile) []query {
	t.Helper()
	var qs []query
	seen := map[string]string{}
	for _, f := range files {
		for _, g := range f.spec.Groups {
			if prev, ok := seen["group "+g.Name]; ok {
				t.Errorf("%s: group %s is also in %s (Prometheus refuses duplicate group names)", f.path, g.Name, prev)
			}
			seen["group "+g.Name] = f.path
			if len(g.Rules) == 0 {
				t.Errorf("%s: group %s has no rules", f.path, g.Name)
			}
			for i, r := range g.Rules {
				where := fmt.Sprintf("%s: group %s, rule %d", f.path, g.Name, i)
				switch {
				case r.Record != "" && r.Alert == "":
					where = fmt.Sprintf("%s: record %s", f.path, r.Record)
					// level:metric:operations, Prometheus' naming convention for recorded series.
					if !regexp.MustCompile(`^[a-z_]+:gateway_[a-z0-9_]+:[a-z0-9_]+$`).MatchString(r.Record) {
						t.Errorf("%s: name it level:metric:operations (e.g. instance_model:gateway_requests:rate5m)", where)
					}
				case r.Alert != "" && r.Record == "":
					where = fmt.Sprintf("%s: alert %s", f.path, r.Alert)
					if prev, ok := seen["alert "+r.Alert]; ok {
						t.Errorf("%s: alert %s is also in %s", where, r.Alert, prev)
					}
					seen["alert "+r.Alert] = f.path
					checkAlert(t, where, r)
				default:
					t.Errorf("%s: a rule is either a record or an alert", where)
				}
				if r.Expr.StrVal == "" {
					t.Errorf("%s: no expr", where)
					continue
				}
				ast, err := promqlParser.ParseExpr(r.Expr.StrVal)
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				qs = append(qs, query{where: where, expr: r.Expr.StrVal, ast: ast, alert: r.Alert != ""})
			}
		}
	}
	return qs
}

var severities = []string{"critical", "warning", "info"}

// checkAlert: what an alert must carry for whoever receives it.
func checkAlert(t *testing.T, where string, r monitoringv1.Rule) {
	t.Helper()
	if !strings.HasPrefix(r.Alert, "Imagegate") {
		t.Errorf("%s: alert names start with Imagegate (one prefix for routing and silences)", where)
	}
	if !slices.Contains(severities, r.Labels["severity"]) {
		t.Errorf("%s: label severity %q, want one of %v", where, r.Labels["severity"], severities)
	}
	for _, a := range []string{"summary", "description", "runbook"} {
		if strings.TrimSpace(r.Annotations[a]) == "" {
			t.Errorf("%s: no %s annotation (summary: one line; description: what it means; runbook: what to do)", where, a)
		}
	}
}

func TestRuleFilesParse(t *testing.T) {
	files := readRuleFiles(t)
	qs := ruleQueries(t, files)
	alerts := 0
	for _, q := range qs {
		if q.alert {
			alerts++
		}
	}
	if alerts == 0 || alerts == len(qs) {
		t.Fatalf("%d rules, %d of them alerts: want recording rules and alerts", len(qs), alerts)
	}
	t.Logf("%d rules in %d files, %d alerts", len(qs), len(files), alerts)
}

// TestPromtoolRules runs Prometheus' own checks: promtool check rules on every rule file, and
// promtool test rules on the alerts' unit tests (monitoring/tests/).
func TestPromtoolRules(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	files, _ := filepath.Glob(filepath.Join("monitoring", "*.yaml"))
	out, err := exec.Command(promtool, append([]string{"check", "rules"}, files...)...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules %v: %v\n%s", files, err, out)
	} else {
		t.Logf("promtool check rules:\n%s", out)
	}
	tests, _ := filepath.Glob(filepath.Join("monitoring", "tests", "*.yaml"))
	if len(tests) == 0 {
		t.Fatal("no unit tests in monitoring/tests/")
	}
	out, err = exec.Command(promtool, append([]string{"test", "rules"}, tests...)...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool test rules %v: %v\n%s", tests, err, out)
	}
	// Every alert has a unit test.
	var tested []string
	for _, p := range tests {
		for _, m := range regexp.MustCompile(`(?m)^\s*alertname: (\w+)$`).FindAllStringSubmatch(readFile(t, p), -1) {
			tested = append(tested, m[1])
		}
	}
	for _, f := range readRuleFiles(t) {
		for _, g := range f.spec.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" && !slices.Contains(tested, r.Alert) {
					t.Errorf("alert %s has no test in monitoring/tests/", r.Alert)
				}
			}
		}
	}
}

// prometheusRule is the rule files' rendering for the Prometheus Operator.
func prometheusRule(files []ruleFile) map[string]any {
	var groups []monitoringv1.RuleGroup
	for _, f := range files {
		groups = append(groups, f.spec.Groups...)
	}
	return map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name":   "imagegate",
			"labels": map[string]string{"app.kubernetes.io/component": "gateway"},
		},
		"spec": monitoringv1.PrometheusRuleSpec{Groups: groups},
	}
}

// TestPrometheusRuleMatchesRuleFiles: kubernetes/base/prometheusrule.yaml holds exactly the
// groups of monitoring/*.yaml, in the base's rendering and the overlay's (its schema and strict
// decoding are checked with the other manifests). go test -run PrometheusRule -update rewrites it.
func TestPrometheusRuleMatchesRuleFiles(t *testing.T) {
	files := readRuleFiles(t)
	want := prometheusRule(files)
	if *updatePrometheusRule {
		body, err := yaml.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		header := "# Generated from deploy/monitoring/*.yaml (the Prometheus Operator's form of the same rules):\n" +
			"# edit those, then run `go test -run PrometheusRule -update` in deploy/.\n"
		if err := os.WriteFile(prometheusRuleFile, append([]byte(header), body...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantSpec := want["spec"].(monitoringv1.PrometheusRuleSpec)
	for _, dir := range []string{"kubernetes/base", "kubernetes/overlays/example"} {
		var found []*monitoringv1.PrometheusRule
		for _, m := range render(t, dir) {
			if m.gvk != "monitoring.coreos.com/v1/PrometheusRule" {
				continue
			}
			obj, err := decodeStrict(m)
			if err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			found = append(found, obj.(*monitoringv1.PrometheusRule))
		}
		if len(found) != 1 {
			t.Fatalf("kustomize build %s renders %d PrometheusRules, want 1 (%s in the base's resources)", dir, len(found), prometheusRuleFile)
		}
		if !reflect.DeepEqual(found[0].Spec, wantSpec) {
			t.Errorf("kustomize build %s: the PrometheusRule's groups differ from monitoring/*.yaml: run go test -run PrometheusRule -update in deploy/", dir)
		}
	}
}

// The dashboard, as far as the checks read it.
type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashTarget struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Datasource   *dsRef `json:"datasource"`
}

type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *dsRef `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []dashTarget `json:"targets"`
	Panels  []dashPanel  `json:"panels"`
}

type dashVar struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Query      json.RawMessage `json:"query"`
	Datasource *dsRef          `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

type dashboardDoc struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []dashVar `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

// grafanaBuiltins are the interval variables Grafana fills in itself, with the values a query
// gets here (a few scrape intervals; Prometheus scrapes every 500 ms in the tests).
var grafanaBuiltins = map[string]string{"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}

// dsVariable is the datasource variable every panel and query uses: the dashboard imports into
// any Grafana, through the UI or provisioned from a file, and asks for nothing.
const dsVariable = "datasource"

var varRefRE = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// fill replaces a query's Grafana variables: built-ins by a duration, the dashboard's query
// variables by their "All" value, or, with marker, by a marker naming the variable.
func fill(expr string, vars map[string]dashVar, marker bool) (string, error) {
	var errs []error
	out := varRefRE.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRefRE.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		if v, ok := grafanaBuiltins[name]; ok {
			return v
		}
		v, ok := vars[name]
		if !ok || v.Type != "query" {
			errs = append(errs, fmt.Errorf("$%s is neither a query variable of the dashboard nor one of Grafana's interval built-ins %v", name, slices.Sorted(maps.Keys(grafanaBuiltins))))
			return ref
		}
		if marker {
			return "__var_" + name + "__"
		}
		return v.AllValue
	})
	return out, errors.Join(errs...)
}

func mapsKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// wildLabels parses expr with its variables as markers and returns the labels whose matchers
// hold a variable; a variable anywhere but in a regex matcher is an error (a multi-value
// variable becomes a regex such as (a|b), which only =~ and !~ take).
func wildLabels(expr string, vars map[string]dashVar) (map[string]bool, error) {
	marked, err := fill(expr, vars, true)
	if err != nil {
		return nil, err
	}
	ast, err := promqlParser.ParseExpr(marked)
	if err != nil {
		return nil, err
	}
	wild := map[string]bool{}
	used := 0
	var errs []error
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if !strings.Contains(m.Value, "__var_") {
					continue
				}
				used += strings.Count(m.Value, "__var_")
				wild[m.Name] = true
				if m.Type != labels.MatchRegexp && m.Type != labels.MatchNotRegexp {
					errs = append(errs, fmt.Errorf("%s: a variable takes a regex matcher (=~), as a multi-value selection is a regex", m))
				}
			}
		}
		return nil
	})
	if n := strings.Count(marked, "__var_"); n != used {
		errs = append(errs, fmt.Errorf("a variable outside a label matcher's value (%d of %d uses)", n-used, n))
	}
	return wild, errors.Join(errs...)
}

// labelValuesRE is the Prometheus datasource's label_values(selector, label) variable query.
var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// readDashboard decodes the dashboard and returns its queries: every panel target and every
// variable's selector, parsed, with variables filled in.
func readDashboard(t *testing.T, recorded map[string]bool) (dashboardDoc, []query, map[string]dashVar) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboardDoc
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	vars := map[string]dashVar{}
	for _, v := range d.Templating.List {
		if _, dup := vars[v.Name]; dup {
			t.Errorf("%s: variable %s twice", dashboardFile, v.Name)
		}
		vars[v.Name] = v
	}
	var qs []query
	add := func(where, expr, legend string) {
		filled, err := fill(expr, vars, false)
		if err == nil {
			var wild map[string]bool
			if wild, err = wildLabels(expr, vars); err == nil {
				var ast parser.Expr
				if ast, err = promqlParser.ParseExpr(filled); err == nil {
					qs = append(qs, query{where: where, expr: filled, ast: ast, legend: legend, wild: wild})
				}
			}
		}
		if err != nil {
			t.Errorf("%s: %s: %v", where, expr, err)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := fmt.Sprintf("%s: variable %s", dashboardFile, v.Name)
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct{ Query string }
			json.Unmarshal(v.Query, &obj)
			q = obj.Query
		}
		m := labelValuesRE.FindStringSubmatch(strings.TrimSpace(q))
		if m == nil {
			t.Errorf("%s: query %q, want label_values(selector, label)", where, q)
			continue
		}
		// The selector, as a query; the label must be on its series (checked on a gateway).
		add(where, m[1], "{{"+m[2]+"}}")
	}
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				where := fmt.Sprintf("%s: panel %q, target %s", dashboardFile, p.Title, tg.RefID)
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: no expr", where)
					continue
				}
				add(where, tg.Expr, tg.LegendFormat)
			}
		}
	}
	walk(d.Panels)
	// What it reads from the recording rules exists there.
	for _, q := range qs {
		parser.Inspect(q.ast, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && strings.Contains(vs.Name, ":") && !recorded[vs.Name] {
				t.Errorf("%s: %s is recorded by no rule of monitoring/*.yaml", q.where, vs.Name)
			}
			return nil
		})
	}
	return d, qs, vars
}

// TestDashboardIsValid: the dashboard is Grafana's JSON model (the Foundation SDK's strict
// decoding: unknown fields, wrong types and missing required fields are errors, panel options
// and Prometheus queries included), importable anywhere (every query on the datasource
// variable), with the model and instance variables, a layout without overlaps, and queries that
// parse once Grafana has filled in the variables.
func TestDashboardIsValid(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	var sdk dashboard.Dashboard
	// It returns its error list as an error even when the list is empty.
	if err := sdk.UnmarshalJSONStrict(data); err != nil && len(err.(cog.BuildErrors)) > 0 {
		t.Errorf("%s, decoded strictly by the Grafana Foundation SDK: %v", dashboardFile, err)
	}

	d, qs, vars := readDashboard(t, recordedNames(readRuleFiles(t)))
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title (links and provisioning find it by uid)")
	}
	if v, ok := vars[dsVariable]; !ok || v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("want a datasource variable %q of type prometheus, got %+v", dsVariable, v)
	}
	for _, name := range []string{"job", "instance", "model"} {
		v, ok := vars[name]
		if !ok {
			t.Errorf("the dashboard has no %s variable", name)
			continue
		}
		if v.Type != "query" || !v.Multi || !v.IncludeAll || v.AllValue != ".*" {
			// With allValue .*, "All" also matches what appeared after the page loaded.
			t.Errorf("variable %s: want a multi-value query variable with All as .*, got %+v", name, v)
		}
	}
	checkDS := func(where string, ds *dsRef) {
		if ds == nil || ds.Type != "prometheus" || ds.UID != "${"+dsVariable+"}" {
			t.Errorf("%s: datasource %+v, want {type: prometheus, uid: ${%s}}", where, ds, dsVariable)
		}
	}
	for _, v := range vars {
		if v.Type == "query" {
			checkDS("variable "+v.Name, v.Datasource)
		}
	}
	ids := map[int]string{}
	type box struct {
		title      string
		x, y, w, h int
	}
	var boxes []box
	panels := 0
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if prev, dup := ids[p.ID]; dup || p.ID <= 0 {
				t.Errorf("panel %q: id %d (also %q): ids are positive and unique", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v outside Grafana's 24 columns", p.Title, g)
			}
			for _, b := range boxes {
				if g.X < b.x+b.w && b.x < g.X+g.W && g.Y < b.y+b.h && b.y < g.Y+g.H {
					t.Errorf("panel %q overlaps panel %q", p.Title, b.title)
				}
			}
			boxes = append(boxes, box{p.Title, g.X, g.Y, g.W, g.H})
			if p.Type == "row" {
				continue
			}
			panels++
			if p.Title == "" {
				t.Errorf("panel %d has no title", p.ID)
			}
			checkDS(fmt.Sprintf("panel %q", p.Title), p.Datasource)
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				checkDS(fmt.Sprintf("panel %q, target %s", p.Title, tg.RefID), tg.Datasource)
				if tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
			}
		}
	}
	walk(d.Panels)
	t.Logf("%d panels, %d queries", panels, len(qs))
}

// TestMonitoringDocs: docs/deploy.md's alert table lists every alert with its severity, and
// names no other.
func TestMonitoringDocs(t *testing.T) {
	doc := readFile(t, filepath.Join("..", "docs", "deploy.md"))
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(Imagegate\\w+)` \\| (\\w+) \\|").FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = m[2]
	}
	for _, f := range readRuleFiles(t) {
		for _, g := range f.spec.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				if sev, ok := documented[r.Alert]; !ok {
					t.Errorf("docs/deploy.md's alert table does not list %s", r.Alert)
				} else if sev != r.Labels["severity"] {
					t.Errorf("docs/deploy.md lists %s as %s, its rule says %s", r.Alert, sev, r.Labels["severity"])
				}
				delete(documented, r.Alert)
			}
		}
	}
	for a := range documented {
		t.Errorf("docs/deploy.md lists alert %s, which no rule defines", a)
	}
	for _, f := range []string{dashboardFile, "monitoring/recording-rules.yaml", "monitoring/alerting-rules.yaml", prometheusRuleFile} {
		if !strings.Contains(doc, f) {
			t.Errorf("docs/deploy.md does not mention %s", f)
		}
	}
}

// selectors returns the vector selectors of an expression with the metric name each selects.
func selectors(e parser.Expr) ([]*parser.VectorSelector, []string) {
	var vss []*parser.VectorSelector
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			vss = append(vss, vs)
			names = append(names, name)
		}
		return nil
	})
	return vss, names
}

// conditionOperands returns what an alert's condition compares or combines: each must return
// series on a healthy gateway, or the condition could never be true. A comparison with a
// number yields its other side; and, or and a comparison of two vectors both sides; unless its
// left side; absent() its argument.
func conditionOperands(e parser.Expr) []parser.Expr {
	switch x := e.(type) {
	case *parser.ParenExpr:
		return conditionOperands(x.Expr)
	case *parser.BinaryExpr:
		switch {
		case x.Op == parser.LUNLESS:
			return conditionOperands(x.LHS)
		case x.Op == parser.LAND || x.Op == parser.LOR:
			return append(conditionOperands(x.LHS), conditionOperands(x.RHS)...)
		case x.Op.IsComparisonOperator():
			lhsNum := x.LHS.Type() == parser.ValueTypeScalar
			rhsNum := x.RHS.Type() == parser.ValueTypeScalar
			switch {
			case lhsNum && !rhsNum:
				return []parser.Expr{x.RHS}
			case rhsNum && !lhsNum:
				return []parser.Expr{x.LHS}
			}
			return append(conditionOperands(x.LHS), conditionOperands(x.RHS)...)
		}
	case *parser.Call:
		if x.Func.Name == "absent" || x.Func.Name == "absent_over_time" {
			return conditionOperands(x.Args[0])
		}
	}
	return []parser.Expr{e}
}

// legendLabels returns the labels a legendFormat names ({{model}}).
func legendLabels(legend string) []string {
	var ls []string
	for _, m := range regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`).FindAllStringSubmatch(legend, -1) {
		ls = append(ls, m[1])
	}
	sort.Strings(ls)
	return slices.Compact(ls)
}
