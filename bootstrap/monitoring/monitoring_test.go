package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtool is Debian's prometheus package's rule checker, or the test
// skips (fails under CI=true).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found: apt-get install prometheus (make test-deps)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func parseRules(t *testing.T, b []byte) ruleFile {
	t.Helper()
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPromtoolCheckRules: Prometheus' own checker accepts the shipped
// rules, the rules as the tests scale them, and every expression of the
// dashboard (as recording rules, which it parses the same way).
func TestPromtoolCheckRules(t *testing.T) {
	scaled, err := Scaled(RulesYAML, 1.0/30)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for n, dq := range queries {
		q, _ := json.Marshal(dq.Expr)
		fmt.Fprintf(&b, "  - record: dashboard:panel_%d\n    expr: %s\n", n, q)
	}
	if len(queries) < 15 {
		t.Errorf("the dashboard has %d queries", len(queries))
	}
	for name, data := range map[string][]byte{
		"rules.yaml":  Rules(Options{RunbookBase: "https://docs.example.com/appliance/README.md"}),
		"scaled.yaml": scaled, "dashboard.yaml": []byte(b.String()),
	} {
		out := runPromtool(t, "check", "rules", writeTemp(t, name, data))
		if !strings.Contains(out, "SUCCESS") {
			t.Errorf("%s: %s", name, out)
		}
	}
}

// TestPromtoolTestRules runs the alerts' unit tests (testdata), and checks
// that they cover every alert: each one firing with its labels and
// annotations, and silent on a healthy cluster.
func TestPromtoolTestRules(t *testing.T) {
	out := runPromtool(t, "test", "rules", filepath.Join("testdata", "alerts.test.yaml"))
	if !strings.Contains(out, "SUCCESS") {
		t.Fatal(out)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "alerts.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			Name  string `json:"name"`
			Cases []struct {
				Alert string            `json:"alertname"`
				Exp   []json.RawMessage `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatal(err)
	}
	fires, silentHealthy := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, c := range tc.Cases {
			if len(c.Exp) > 0 {
				fires[c.Alert] = true
			} else if tc.Name == "healthy cluster" {
				silentHealthy[c.Alert] = true
			}
		}
	}
	for _, g := range parseRules(t, RulesYAML).Groups {
		for _, r := range g.Rules {
			if !fires[r.Alert] {
				t.Errorf("%s: no test makes it fire", r.Alert)
			}
			if !silentHealthy[r.Alert] {
				t.Errorf("%s: not checked silent on the healthy cluster", r.Alert)
			}
		}
	}
}

// TestAlertsShape: every alert says how bad it is, what happened on which
// node, and where its runbook section is, and that section exists.
func TestAlertsShape(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(readme), -1) {
		a := strings.ToLower(m[1])
		a = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(a, "")
		anchors[strings.ReplaceAll(a, " ", "-")] = true
	}
	seen := map[string]bool{}
	for _, g := range parseRules(t, RulesYAML).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("rule %q: an alert of its own name is wanted", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[k] == "" {
					t.Errorf("%s: no %s", r.Alert, k)
				}
			}
			if len(r.Annotations) != 3 {
				t.Errorf("%s: annotations %v", r.Alert, r.Annotations)
			}
			want := runbookPrefix + strings.ToLower(r.Alert)
			if r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !anchors[strings.ToLower(r.Alert)] {
				t.Errorf("%s: README.md has no section %q for its runbook", r.Alert, r.Alert)
			}
			if r.Alert != "ApplianceDown" && !strings.Contains(r.Annotations["summary"], "$labels.node") &&
				!strings.Contains(r.Annotations["summary"], "$labels.vip") {
				t.Errorf("%s: the summary names neither the node nor the VIP", r.Alert)
			}
		}
	}
}

// The places where the files name metrics and labels: expressions (the
// rules', the dashboard's, and the queries inside annotation templates),
// annotation templates and legends.
var (
	metricRE  = regexp.MustCompile(`\b(appliance_[a-z0-9_]+|up)\b`)
	queryRE   = regexp.MustCompile(`printf "([^"]*)"`)
	exprLabel = []*regexp.Regexp{
		regexp.MustCompile(`\b(?:by|on|group_left|group_right) \(([a-z_, ]*)\)`),
		regexp.MustCompile(`[{,]\s*([a-z_]+)\s*(?:=~|!=|!~|=)\s*(?:"|%q)`),
	}
	templateLabel = []*regexp.Regexp{
		regexp.MustCompile(`\$labels\.([a-z_]+)`),
		regexp.MustCompile(`\.Labels\.([a-z_]+)`),
		regexp.MustCompile(`sortByLabel "([a-z_]+)"`),
	}
	legendLabel = regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
)

// usedInFiles lists the expressions, templates and legends of the files.
func usedInFiles(t *testing.T) (exprs, templates, legends []string) {
	t.Helper()
	for _, g := range parseRules(t, RulesYAML).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			for _, a := range r.Annotations {
				templates = append(templates, a)
				for _, q := range queryRE.FindAllStringSubmatch(a, -1) {
					exprs = append(exprs, q[1])
				}
			}
		}
	}
	queries, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		exprs = append(exprs, q.Expr)
		legends = append(legends, q.Legend)
	}
	return exprs, templates, legends
}

// TestNamesInFiles: Metrics is exactly what the rules and the dashboard
// name (every name there, nothing else), and every label they read is one
// of Metrics' or a target label. app/node checks Metrics against what the
// services export.
func TestNamesInFiles(t *testing.T) {
	exprs, templates, legends := usedInFiles(t)
	declared := map[string]Metric{}
	labels := map[string]bool{}
	for _, m := range Metrics {
		if _, dup := declared[m.Name]; dup {
			t.Errorf("%s listed twice", m.Name)
		}
		declared[m.Name] = m
		for _, l := range m.Labels {
			labels[l] = true
		}
		if !slices.Contains(m.Labels, "node") {
			t.Errorf("%s: every appliance series has the node label", m.Name)
		}
	}
	for _, l := range TargetLabels {
		labels[l] = true
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricRE.FindAllStringSubmatch(e, -1) {
			name := m[1]
			if slices.Contains(Scraped, name) {
				continue
			}
			base := name
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, s); ok && declared[b].Histogram {
					base = b
				}
			}
			used[base] = true
			if _, ok := declared[base]; !ok {
				t.Errorf("%q reads %s, which Metrics does not list", e, name)
			}
		}
	}
	for name := range declared {
		if !used[name] {
			t.Errorf("Metrics lists %s, which no rule or panel reads", name)
		}
	}
	check := func(texts []string, res ...*regexp.Regexp) {
		for _, text := range texts {
			for _, re := range res {
				for _, m := range re.FindAllStringSubmatch(text, -1) {
					for _, l := range strings.Split(m[1], ",") {
						if l = strings.TrimSpace(l); l != "" && !labels[l] {
							t.Errorf("label %q (%s) is no listed metric's", l, m[0])
						}
					}
				}
			}
		}
	}
	check(exprs, exprLabel...)
	check(templates, templateLabel...)
	check(legends, legendLabel)
	if !strings.Contains(string(RulesYAML), `up{job="`+Job+`"}`) {
		t.Errorf("the rules do not read up{job=%q}", Job)
	}
}

// TestScaled: scaling changes the durations and nothing else, and by 1
// nothing at all.
func TestScaled(t *testing.T) {
	same, err := Scaled(RulesYAML, 1)
	if err != nil || string(same) != string(RulesYAML) {
		t.Fatalf("Scaled by 1 changed the rules (%v)", err)
	}
	fast, err := Scaled(RulesYAML, 1.0/30)
	if err != nil {
		t.Fatal(err)
	}
	mask := func(b []byte) string {
		s := forRE.ReplaceAllString(string(b), "${1}D")
		return rangeRE.ReplaceAllString(s, "[D]")
	}
	if mask(fast) != mask(RulesYAML) {
		t.Error("scaling changed more than the durations")
	}
	for _, want := range []string{"for: 2s\n", "for: 10s\n", "[20s]", "[4s]"} {
		if !strings.Contains(string(fast), want) {
			t.Errorf("scaled by 1/30: no %q", want)
		}
	}
	orig, scaled := parseRules(t, RulesYAML), parseRules(t, fast)
	for i, g := range orig.Groups {
		for j, r := range g.Rules {
			s := scaled.Groups[i].Rules[j]
			if (r.For == "") != (s.For == "") || r.Alert != s.Alert {
				t.Errorf("%s: for %q became %q", r.Alert, r.For, s.For)
			}
		}
	}
	if _, err := Scaled(RulesYAML, 0); err == nil {
		t.Error("factor 0 accepted")
	}
	if _, err := Scaled([]byte("    for: 1s\n"), 1.0/10000); err == nil {
		t.Error("a duration scaled to nothing accepted")
	}
}

// The PrometheusRule's spec is the rule file, runbook links aside.
func TestPrometheusRule(t *testing.T) {
	files, err := Manifests(Options{RunbookBase: "https://docs.example.com/appliance/README.md"})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Path != PrometheusRuleFile || files[1].Path != DashboardFile {
		t.Fatalf("manifests %v", files)
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name, Namespace string
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(files[0].Data, &obj); err != nil {
		t.Fatal(err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" || obj.Metadata.Name != RuleName || obj.Metadata.Namespace != Namespace {
		t.Errorf("PrometheusRule header %+v", obj)
	}
	spec := parseRules(t, obj.Spec)
	want := parseRules(t, RulesYAML)
	for i := range want.Groups {
		for j := range want.Groups[i].Rules {
			r, w := spec.Groups[i].Rules[j], want.Groups[i].Rules[j]
			u := w.Annotations["runbook_url"]
			w.Annotations["runbook_url"] = "https://docs.example.com/appliance/README.md#" + strings.TrimPrefix(u, runbookPrefix)
			a, _ := json.Marshal(r)
			b, _ := json.Marshal(w)
			if string(a) != string(b) {
				t.Errorf("rule %d.%d differs:\n%s\n%s", i, j, a, b)
			}
		}
	}
	var cm struct {
		Metadata struct {
			Name, Namespace string
			Labels          map[string]string
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(files[1].Data, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Metadata.Namespace != DashboardNamespace || cm.Metadata.Labels[DashboardLabel] != "true" || cm.Data[DashboardKey] != string(DashboardJSON) {
		t.Errorf("dashboard ConfigMap %+v", cm.Metadata)
	}
	// kubectl apply keeps the object in an annotation of at most 256 KiB.
	if len(files[1].Data) > 200<<10 || len(files[0].Data) > 200<<10 {
		t.Errorf("manifests of %d and %d bytes", len(files[0].Data), len(files[1].Data))
	}
}

// TestDashboardQueriesInRows: the queries of panels inside a collapsed row
// are listed too, so the checks above see every query the console runs.
func TestDashboardQueriesInRows(t *testing.T) {
	shipped := DashboardJSON
	t.Cleanup(func() { DashboardJSON = shipped })
	DashboardJSON = []byte(`{"panels": [
		{"type": "graph", "title": "a", "targets": [{"expr": "up", "legendFormat": "{{instance}}"}]},
		{"type": "row", "title": "r", "collapsed": true, "panels": [
			{"type": "graph", "title": "b", "targets": [{"expr": "appliance_node_info"}, {"expr": "x"}]}]}]}`)
	got, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{{"a", "up", "{{instance}}"}, {"b", "appliance_node_info", ""}, {"b", "x", ""}}
	if !slices.Equal(got, want) {
		t.Errorf("queries %+v, want %+v", got, want)
	}
}
