package monitoring

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// RulesYAML is the alerting rules as Prometheus reads a rule file (groups).
//
//go:embed rules.yaml
var RulesYAML []byte

// DashboardJSON is the Grafana dashboard.
//
//go:embed dashboard.json
var DashboardJSON []byte

// Where `appliance manifests` writes the two under the installer's asset
// folder, beside bootstrap.NodeReaderFile.
const (
	PrometheusRuleFile = "openshift/99-appliance-prometheusrule.yaml"
	DashboardFile      = "openshift/99-appliance-dashboard.yaml"
)

// Names of the objects.
const (
	// Namespace holds the PrometheusRule; the platform Prometheus reads
	// rules in namespaces labelled openshift.io/cluster-monitoring=true,
	// which the scrape configuration's namespace is too.
	Namespace = "openshift-appliance"
	// RuleName names the PrometheusRule.
	RuleName = "appliance"
	// DashboardNamespace and DashboardLabel are where and how the OpenShift
	// console finds dashboards.
	DashboardNamespace = "openshift-config-managed"
	DashboardLabel     = "console.openshift.io/dashboard"
	// DashboardName names the ConfigMap; DashboardKey is its data key.
	DashboardName = "appliance-dashboard"
	DashboardKey  = "appliance.json"
	// Job is the scrape job the appliance's targets are in: the rules'
	// up{job="appliance"}.
	Job = "appliance"
)

// Query is one query of the dashboard: its panel's title, its PromQL and
// its legend.
type Query struct {
	Panel, Expr, Legend string
}

// DashboardQueries lists every query of DashboardJSON, in the panels'
// order, those inside a collapsed row included: what promtool checks and
// what the e2e test asks a real Prometheus.
func DashboardQueries() ([]Query, error) {
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"` // a collapsed row's
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(DashboardJSON, &dash); err != nil {
		return nil, fmt.Errorf("monitoring: dashboard.json: %w", err)
	}
	var out []Query
	var walk func([]json.RawMessage) error
	walk = func(raws []json.RawMessage) error {
		for _, raw := range raws {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("monitoring: dashboard.json: %w", err)
			}
			for _, tg := range p.Targets {
				out = append(out, Query{Panel: p.Title, Expr: tg.Expr, Legend: tg.LegendFormat})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(dash.Panels)
}

// Options change what the manifests say.
type Options struct {
	// RunbookBase replaces "README.md" in the rules' runbook_url
	// annotations: where the README is published, so the links open its
	// Monitoring section. Empty keeps README.md#anchor.
	RunbookBase string
}

// runbookPrefix is how rules.yaml spells each runbook link.
const runbookPrefix = "README.md#"

// Rules is the rule file with opts applied.
func Rules(opts Options) []byte {
	if opts.RunbookBase == "" {
		return RulesYAML
	}
	return []byte(strings.ReplaceAll(string(RulesYAML), "runbook_url: "+runbookPrefix,
		"runbook_url: "+strings.TrimSuffix(opts.RunbookBase, "#")+"#"))
}

// durationRE matches a duration as the rules spell them: an integer and
// one unit of s, m or h (rules.yaml uses no other).
const durationRE = `(\d+)(ms|s|m|h)`

var (
	forRE   = regexp.MustCompile(`(?m)^(\s+for: )` + durationRE + `\s*$`)
	rangeRE = regexp.MustCompile(`\[` + durationRE + `\]`)
)

// Scaled returns rules with every duration (a rule's for:, every range
// selector [d]) multiplied by factor and nothing else changed: thresholds,
// expressions and annotations stay as shipped. Tests that make faults
// happen in seconds evaluate the shipped rules this way (Scaled(x, 1) is x).
func Scaled(rules []byte, factor float64) ([]byte, error) {
	if factor <= 0 {
		return nil, fmt.Errorf("monitoring: scale factor %v is not positive", factor)
	}
	if factor == 1 {
		return rules, nil
	}
	var bad error
	scale := func(n, unit string) string {
		v, err := strconv.Atoi(n)
		if err != nil {
			bad = err
			return n + unit
		}
		d, err := time.ParseDuration(strconv.Itoa(v) + unit)
		if err != nil {
			bad = err
			return n + unit
		}
		d = time.Duration(float64(d) * factor).Round(time.Millisecond)
		if d <= 0 {
			bad = fmt.Errorf("monitoring: %s%s scaled by %v is no duration", n, unit, factor)
		}
		if d%time.Second == 0 {
			return strconv.FormatInt(int64(d/time.Second), 10) + "s"
		}
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	out := forRE.ReplaceAllStringFunc(string(rules), func(m string) string {
		s := forRE.FindStringSubmatch(m)
		return s[1] + scale(s[2], s[3])
	})
	out = rangeRE.ReplaceAllStringFunc(out, func(m string) string {
		s := rangeRE.FindStringSubmatch(m)
		return "[" + scale(s[1], s[2]) + "]"
	})
	return []byte(out), bad
}

// PrometheusRuleYAML is the PrometheusRule (monitoring.coreos.com/v1)
// whose spec is the rule file's groups.
func PrometheusRuleYAML(opts Options) ([]byte, error) {
	var spec map[string]any
	if err := yaml.Unmarshal(Rules(opts), &spec); err != nil {
		return nil, fmt.Errorf("monitoring: rules.yaml: %w", err)
	}
	obj := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name":      RuleName,
			"namespace": Namespace,
			"labels":    map[string]any{"app": "appliance"},
		},
		"spec": spec,
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("monitoring: PrometheusRule: %w", err)
	}
	return out, nil
}

// DashboardConfigMap is the ConfigMap the OpenShift console shows as a
// dashboard (Observe, Dashboards), holding DashboardJSON.
func DashboardConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      DashboardName,
			Namespace: DashboardNamespace,
			Labels:    map[string]string{DashboardLabel: "true", "app": "appliance"},
		},
		Data: map[string]string{DashboardKey: string(DashboardJSON)},
	}
}

// DashboardYAML is DashboardConfigMap as a manifest.
func DashboardYAML() ([]byte, error) {
	out, err := yaml.Marshal(DashboardConfigMap())
	if err != nil {
		return nil, fmt.Errorf("monitoring: dashboard ConfigMap: %w", err)
	}
	return out, nil
}

// File is a manifest and where it goes under the asset folder.
type File struct {
	Path string
	Data []byte
}

// Manifests are the PrometheusRule and the dashboard ConfigMap.
func Manifests(opts Options) ([]File, error) {
	rule, err := PrometheusRuleYAML(opts)
	if err != nil {
		return nil, err
	}
	dash, err := DashboardYAML()
	if err != nil {
		return nil, err
	}
	return []File{{PrometheusRuleFile, rule}, {DashboardFile, dash}}, nil
}
