package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// maxConfigSize bounds what Parse reads; real files are a few KiB (an
// install-config with a pull secret stays well under 100 KiB).
const maxConfigSize = 4 << 20

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path is the field at fault in the file's own names, e.g.
	// "network.apiVIPs[0]" or "nodes[2].mac"; "" for the document itself.
	Path string
	// Message says what is wrong and how to fix it.
	Message string
}

// String renders "path: message".
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ValidationError lists every problem found in a configuration. Parse,
// ParseInstallConfig and Load return it (possibly wrapped) for any bad input;
// find it with errors.As.
type ValidationError struct {
	Problems []Problem
}

// Error lists the problems one per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Load reads an appliance.yaml, or an installer install-config.yaml (told
// apart by its apiVersion, metadata.name and platform keys), and returns the
// validated model.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster: load: %w", err)
	}
	parse := Parse
	if isInstallConfig(data) {
		parse = ParseInstallConfig
	}
	cfg, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("cluster: load %s:\n%w", path, err)
	}
	return cfg, nil
}

// isInstallConfig reports whether data looks like an installer
// install-config.yaml rather than an appliance.yaml.
func isInstallConfig(data []byte) bool {
	var probe struct {
		APIVersion string `json:"apiVersion"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Platform map[string]any `json:"platform"`
	}
	if len(data) > maxConfigSize || yaml.Unmarshal(data, &probe) != nil {
		return false
	}
	return probe.APIVersion == "v1" && probe.Metadata.Name != "" && probe.Platform != nil
}

// The raw* types are appliance.yaml's schema, read and written: Parse decodes
// them and validate.go turns them into the model; Marshal (marshal.go) fills
// them from the model and encodes them. Leaves are strings (or ints) so that
// every bad value reaches the validator, which names its path. A key tagged
// omitempty is written only when the model holds something there (its zero
// means "not set"); the others are always written, so a written file spells
// out every default. Parse ignores the tag's options.
type rawConfig struct {
	Cluster rawCluster `json:"cluster"`
	Network rawNetwork `json:"network"`
	Nodes   []rawNode  `json:"nodes,omitempty"`
	VRRP    rawVRRP    `json:"vrrp"`
	DHCP    rawDHCP    `json:"dhcp"`
	LB      rawLB      `json:"lb"`
	DNS     rawDNS     `json:"dns"`
	Admin   rawAdmin   `json:"admin"`

	Provision *rawProvision `json:"provision,omitempty"`
}

type rawLB struct {
	Enabled  *bool  `json:"enabled"`
	Balance  string `json:"balance,omitempty"`
	MCS      *bool  `json:"mcs"`
	Redirect *bool  `json:"redirect"`
}

type rawDNS struct {
	Enabled   *bool    `json:"enabled"`
	MDNS      *bool    `json:"mdns"`
	AllowFrom []string `json:"allowFrom,omitempty"`
}

type rawCluster struct {
	Name       string `json:"name"`
	BaseDomain string `json:"baseDomain"`
}

type rawNetwork struct {
	MachineCIDR  string   `json:"machineCIDR,omitempty"`
	MachineCIDRs []string `json:"machineCIDRs"`
	Interface    string   `json:"interface,omitempty"`
	Gateway      string   `json:"gateway,omitempty"`
	APIVIPs      []string `json:"apiVIPs,omitempty"`
	IngressVIPs  []string `json:"ingressVIPs,omitempty"`
	UpstreamDNS  []string `json:"upstreamDNS,omitempty"`
	// The pod networks the DNS answers, and the kubelet's node IP hint.
	ClusterNetwork []string `json:"clusterNetwork"`
	NodeIPHint     []string `json:"nodeIPHint"`
}

type rawNode struct {
	Name string   `json:"name"`
	Role string   `json:"role"`
	MAC  string   `json:"mac,omitempty"`
	IPs  []string `json:"ips,omitempty"`
}

type rawVRRP struct {
	Mode           string   `json:"mode"`
	Transport      string   `json:"transport"`
	Version        int      `json:"version"`
	AdvertInterval string   `json:"advertInterval"`
	Preempt        *bool    `json:"preempt"`
	PreemptDelay   string   `json:"preemptDelay,omitempty"`
	APIVRID        int      `json:"apiVRID,omitempty"`
	IngressVRID    int      `json:"ingressVRID,omitempty"`
	AuthPass       string   `json:"authPass,omitempty"`
	UnicastPeers   []string `json:"unicastPeers,omitempty"`
	Priority       int      `json:"priority,omitempty"`
	// The switches of `appliance run`, after the protocol's fields.
	Enabled          *bool  `json:"enabled"`
	IngressHealthURL string `json:"ingressHealthURL,omitempty"`
}

type rawDHCP struct {
	Enabled       *bool     `json:"enabled"`
	LeaseTime     string    `json:"leaseTime,omitempty"`
	LeaseFile     string    `json:"leaseFile,omitempty"`
	Pool          *rawRange `json:"pool,omitempty"`
	DNS           []string  `json:"dns,omitempty"`
	NTP           []string  `json:"ntp,omitempty"`
	SearchDomains []string  `json:"searchDomains,omitempty"`
}

type rawRange struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

type rawAdmin struct {
	Listen      string `json:"listen,omitempty"`
	MetricsPort int    `json:"metricsPort,omitempty"`
}

// Parse strictly decodes an appliance.yaml document, applies defaults and
// validates it. It returns the model, or a *ValidationError listing every
// problem found (unknown fields, wrong types, bad values, conflicts), each
// naming its field path and the fix. It does no I/O.
func Parse(data []byte) (cfg *Config, err error) {
	// The YAML library is not ours; a panic on hostile input must still come
	// back as an error.
	defer func() {
		if r := recover(); r != nil {
			cfg, err = nil, &ValidationError{Problems: []Problem{{Message: fmt.Sprintf("cannot read the document: %v", r)}}}
		}
	}()
	if len(data) > maxConfigSize {
		return nil, docError("the document is %d bytes; a configuration is at most %d", len(data), maxConfigSize)
	}
	tree, err := yamlTree(data)
	if err != nil {
		return nil, docError("not valid YAML: %s", oneLine(err.Error()))
	}
	if isInstallConfig(data) {
		return nil, docError("this is an installer install-config.yaml, not an appliance.yaml; read it with ParseInstallConfig (Load and 'appliance config check' detect it)")
	}

	v := newValidator(nil)
	checkShape(tree, reflect.TypeFor[rawConfig](), "", v)

	var raw rawConfig
	if len(v.problems) == 0 {
		// The shape check found nothing, so this strict decode succeeds; it
		// stays as a second guard against unknown fields.
		if err := yaml.UnmarshalStrict(data, &raw); err != nil {
			v.add("", "cannot decode: %s", oneLine(err.Error()))
			return nil, v.err()
		}
	} else {
		// Decode what can be decoded so the rest is still validated; the
		// paths already reported are skipped by the validator.
		_ = yaml.Unmarshal(data, &raw)
	}
	cfg = v.validate(&raw)
	if err := v.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// yamlTree converts YAML to a generic JSON tree (numbers kept exact),
// rejecting duplicate keys as the YAML spec asks.
func yamlTree(data []byte) (any, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	return tree, nil
}

func docError(format string, args ...any) error {
	return &ValidationError{Problems: []Problem{{Message: fmt.Sprintf(format, args...)}}}
}

// oneLine folds a multi-line library message so each problem stays on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// checkShape walks the document against the raw types' JSON names, reporting
// unknown fields (with a suggestion) and values of the wrong kind, and marking
// those paths bad so later checks do not pile on. It is case-sensitive, unlike
// encoding/json, so "apiVips" is reported rather than silently accepted.
func checkShape(node any, t reflect.Type, path string, v *validator) {
	if node == nil {
		return // null: treated as absent
	}
	switch t.Kind() {
	case reflect.Pointer:
		checkShape(node, t.Elem(), path, v)
	case reflect.Struct:
		m, ok := node.(map[string]any)
		if !ok {
			v.addBad(path, "want a mapping of %s, got %s", strings.Join(fieldNames(t), ", "), describe(node))
			return
		}
		keys := slices.Sorted(maps.Keys(m))
		for _, k := range keys {
			sub := joinPath(path, k)
			f, ok := fieldByName(t, k)
			if !ok {
				v.addBad(sub, "unknown field%s", suggest(k, fieldNames(t)))
				continue
			}
			checkShape(m[k], f.Type, sub, v)
		}
	case reflect.Slice:
		l, ok := node.([]any)
		if !ok {
			v.addBad(path, "want a list, got %s", describe(node))
			return
		}
		for i, e := range l {
			checkShape(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), v)
		}
	case reflect.String:
		switch x := node.(type) {
		case string:
			if r, ok := controlChar(x); ok {
				v.addBad(path, "holds the control character %U; remove it", r)
			}
		case json.Number, bool:
			// YAML scalars; numbers and booleans are read as their text.
		default:
			v.addBad(path, "want a single value, got %s", describe(node))
		}
	case reflect.Int:
		n, ok := node.(json.Number)
		if !ok {
			v.addBad(path, "want a whole number, got %s", describe(node))
			return
		}
		switch i, err := n.Int64(); {
		case err != nil:
			v.addBad(path, "want a whole number, got %s", short(n.String()))
		case i < math.MinInt32 || i > math.MaxInt32:
			v.addBad(path, "%s is out of range", n)
		}
	case reflect.Bool:
		if _, ok := node.(bool); !ok {
			v.addBad(path, "want true or false, got %s", describe(node))
		}
	}
}

// controlChar finds what Marshal could not write back: DEL, a C1 control
// (U+0080..U+009F) or U+FFFE/U+FFFF. A double-quoted YAML scalar can spell
// one with an escape, but the YAML writer refuses them, and folds NEL
// (U+0085) into a space. C0 controls, a tab say, are written as escapes and
// read back, so files holding one (nodes in the field may) stay readable.
func controlChar(s string) (rune, bool) {
	for _, r := range s {
		if r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0xfffe || r == 0xffff {
			return r, true
		}
	}
	return 0, false
}

func joinPath(path, key string) string {
	if !plainKey(key) {
		key = strconv.Quote(short(key)) // keep odd keys on one line and recognisable
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func plainKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// short trims what is echoed back from the document to a readable length.
func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func describe(node any) string {
	switch x := node.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the text %q", short(x))
	case json.Number:
		return "the number " + x.String()
	case bool:
		return fmt.Sprintf("%t", x)
	}
	return fmt.Sprintf("%T", node)
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		if n := jsonName(f); n != "" && n != "-" {
			names = append(names, n)
		}
	}
	return names
}

func fieldByName(t reflect.Type, name string) (reflect.StructField, bool) {
	for f := range t.Fields() {
		if jsonName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// suggest names the known field closest to a mistyped one, or lists them all.
func suggest(key string, known []string) string {
	best, bestD := "", 3 // suggest only near misses
	for _, k := range known {
		d := editDistance(strings.ToLower(key), strings.ToLower(k))
		if strings.EqualFold(key, k) {
			d = 0
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return " (known fields: " + strings.Join(known, ", ") + ")"
}

// editDistance is the Levenshtein distance; inputs are short field names.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
