package node

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"appliance/internal/cluster"
	"appliance/vrrp"
)

// What the Machine Config Operator's keepalived templates say, as facts the
// appliance's keepalived-openshift mode is held to. TestMCOFactsMatchTemplates
// checks them against the real files of a machine-config-operator checkout.
const (
	mcoBootstrapTemplate = "manifests/on-prem/keepalived.conf.tmpl"
	mcoMasterTemplate    = "templates/master/00-master/on-prem/files/keepalived-keepalived.yaml"
	mcoWorkerTemplate    = "templates/worker/00-worker/on-prem/files/keepalived-keepalived.yaml"
)

// mcoScript is one vrrp_script: its weight (0: FAULT while failing), the
// file its command lives in ("" when inline in the template) and what that
// command must contain for the appliance track that stands for it to mean
// the same thing ("$..." : end with).
type mcoScript struct {
	name     string
	weight   int
	file     string
	contains []string
	track    string // the appliance's track that mirrors it
}

var mcoScripts = []mcoScript{
	{"chk_ocp_lb", 20, "templates/master/00-master/on-prem/files/keepalived-script.yaml",
		[]string{"http://localhost:9444/haproxy_ready", "[ -e /var/run/keepalived/iptables-rule-exists ]"}, TrackLB},
	{"chk_ocp_both", 5, "templates/master/00-master/on-prem/files/keepalived-script-both.yaml",
		[]string{"haproxy_ready && [ -e /var/run/keepalived/iptables-rule-exists ] ||", "/readyz"}, TrackLBOrAPIServer},
	{"chk_mcs", 3, "templates/master/00-master/on-prem/files/keepalived-mcs-script.yaml",
		[]string{`crictl ps --state running | grep -qE '\smachine-config-server\s'`}, TrackMCS},
	{"chk_ingress_ready", 10, "", []string{"$http://localhost:1936/healthz/ready"}, TrackRouterReady},
	// Liveness, not readiness: the command ends at /healthz.
	{"chk_ingress", 0, "", []string{"$http://localhost:1936/healthz"}, TrackRouterAlive},
	{"chk_default_ingress", 50, "templates/common/on-prem/files/keepalived-script-default-ingress.yaml",
		[]string{"--namespace openshift-ingress", "router-default-"}, TrackDefaultRouter},
}

// mcoInstance is one vrrp_instance of a template.
type mcoInstance struct {
	template string
	role     cluster.Role
	kind     cluster.VIPKind
	priority int
	tracks   []string // vrrp_script names, in the template's order
}

var mcoInstances = []mcoInstance{
	{mcoBootstrapTemplate, cluster.RoleBootstrap, cluster.VIPAPI, 70, nil},
	{mcoMasterTemplate, cluster.RoleMaster, cluster.VIPAPI, 40, []string{"chk_ocp_lb", "chk_ocp_both", "chk_mcs"}},
	{mcoMasterTemplate, cluster.RoleMaster, cluster.VIPIngress, 20, []string{"chk_ingress", "chk_ingress_ready", "chk_default_ingress"}},
	{mcoWorkerTemplate, cluster.RoleWorker, cluster.VIPIngress, 20, []string{"chk_ingress", "chk_ingress_ready", "chk_default_ingress"}},
}

// mcoTemplates are the templates that declare vrrp_scripts, with the
// scripts each declares.
var mcoTemplates = map[string][]string{
	mcoBootstrapTemplate: nil,
	mcoMasterTemplate:    {"chk_ocp_lb", "chk_ocp_both", "chk_mcs", "chk_ingress_ready", "chk_ingress", "chk_default_ingress"},
	mcoWorkerTemplate:    {"chk_ingress_ready", "chk_ingress", "chk_default_ingress"},
}

func scriptFact(name string) mcoScript {
	for _, s := range mcoScripts {
		if s.name == name {
			return s
		}
	}
	panic("no vrrp_script " + name)
}

// parsedTemplate is what parseKeepalivedTemplate finds in one template.
type parsedTemplate struct {
	scripts   map[string]parsedScript
	instances []parsedInstance
}

type parsedScript struct {
	weight  int
	command string
}

type parsedInstance struct {
	kind     cluster.VIPKind
	priority int
	tracks   []string
}

// parseKeepalivedTemplate reads keepalived's block syntax out of a Go
// template (MCO's, wrapped in YAML or not): vrrp_script blocks with their
// weight and command, and vrrp_instance blocks, told API or ingress by their
// name, with their priority and track_script. Template actions ({{ }})
// never open or close a block here: only a line ending in "{" opens one,
// and a line that is exactly "}" closes it.
func parseKeepalivedTemplate(text string) (parsedTemplate, error) {
	out := parsedTemplate{scripts: map[string]parsedScript{}}
	depth := 0
	var script string
	var inst *parsedInstance
	inTrack := false
	for n, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		f := strings.Fields(l)
		switch {
		case l == "}":
			depth--
			if inTrack && depth == 1 {
				inTrack = false
			}
			if depth == 0 {
				if inst != nil {
					out.instances = append(out.instances, *inst)
				}
				script, inst = "", nil
			}
			if depth < 0 {
				return out, fmt.Errorf("line %d: a } closes nothing", n+1)
			}
			continue
		case strings.HasSuffix(l, "{") && !strings.HasSuffix(l, "}}"):
			if depth == 0 && len(f) > 1 && f[0] == "vrrp_script" {
				script = f[1]
				out.scripts[script] = parsedScript{}
			}
			if depth == 0 && f[0] == "vrrp_instance" {
				switch {
				case strings.Contains(l, "_API_"):
					inst = &parsedInstance{kind: cluster.VIPAPI}
				case strings.Contains(l, "_INGRESS_"):
					inst = &parsedInstance{kind: cluster.VIPIngress}
				default:
					return out, fmt.Errorf("line %d: vrrp_instance of neither the API nor ingress: %s", n+1, l)
				}
			}
			if depth == 1 && inst != nil && f[0] == "track_script" {
				inTrack = true
			}
			depth++
			continue
		}
		switch {
		case len(f) == 0 || strings.HasPrefix(l, "{{") || strings.HasPrefix(l, "#"):
		case script != "" && depth == 1 && f[0] == "weight" && len(f) == 2:
			w, err := strconv.Atoi(f[1])
			if err != nil {
				return out, fmt.Errorf("line %d: %w", n+1, err)
			}
			s := out.scripts[script]
			s.weight = w
			out.scripts[script] = s
		case script != "" && depth == 1 && f[0] == "script":
			s := out.scripts[script]
			s.command = strings.Trim(strings.TrimSpace(strings.TrimPrefix(l, "script")), `"`)
			out.scripts[script] = s
		case inst != nil && depth == 1 && f[0] == "priority" && len(f) == 2:
			p, err := strconv.Atoi(f[1])
			if err != nil {
				return out, fmt.Errorf("line %d: %w", n+1, err)
			}
			inst.priority = p
		case inst != nil && inTrack && depth == 2 && len(f) == 1:
			inst.tracks = append(inst.tracks, f[0])
		}
	}
	if depth != 0 {
		return out, fmt.Errorf("%d blocks left open", depth)
	}
	return out, nil
}

// mcoFile reads path from dir: a checkout of machine-config-operator, or
// its bare git folder (HEAD's version).
func mcoFile(dir, path string) (string, error) {
	if b, err := os.ReadFile(filepath.Join(dir, path)); err == nil {
		return string(b), nil
	}
	b, err := exec.Command("git", "-C", dir, "show", "HEAD:"+path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("%s in %s: neither a file nor in git HEAD: %w", path, dir, err)
	}
	return string(b), nil
}

// The facts above are what MCO's templates hold today: priorities, weights,
// which instance tracks which script, and what each script checks.
func TestMCOFactsMatchTemplates(t *testing.T) {
	dir := os.Getenv("APPLIANCE_MCO_DIR")
	if dir == "" {
		t.Skip("APPLIANCE_MCO_DIR is not set: the table of MCO's keepalived facts is not compared with the templates " +
			"(set it to a machine-config-operator checkout or bare git folder to compare)")
	}
	parsed := map[string]parsedTemplate{}
	for tmpl, declares := range mcoTemplates {
		text, err := mcoFile(dir, tmpl)
		if err != nil {
			t.Fatal(err)
		}
		p, err := parseKeepalivedTemplate(text)
		if err != nil {
			t.Fatalf("%s: %v", tmpl, err)
		}
		parsed[tmpl] = p
		var names []string
		for name := range p.scripts {
			names = append(names, name)
		}
		slices.Sort(names)
		want := slices.Sorted(slices.Values(declares))
		if !slices.Equal(names, want) {
			t.Errorf("%s declares vrrp_scripts %v, the facts say %v", tmpl, names, want)
		}
		for _, name := range declares {
			got, fact := p.scripts[name], scriptFact(name)
			if got.weight != fact.weight {
				t.Errorf("%s: %s has weight %d, the facts say %d", tmpl, name, got.weight, fact.weight)
			}
			command := got.command
			if fact.file != "" {
				if command, err = mcoFile(dir, fact.file); err != nil {
					t.Fatal(err)
				}
				if base := strings.TrimSuffix(filepath.Base(strings.Fields(got.command)[len(strings.Fields(got.command))-1]), ".sh"); !strings.Contains(fact.file+command, base) {
					t.Errorf("%s: %s runs %q, which %s does not provide", tmpl, name, got.command, fact.file)
				}
			}
			for _, c := range fact.contains {
				if suffix, ok := strings.CutPrefix(c, "$"); ok && !strings.HasSuffix(strings.TrimSpace(command), suffix) {
					t.Errorf("%s: %s's command no longer ends with %q:\n%s", tmpl, name, suffix, command)
				} else if !ok && !strings.Contains(command, c) {
					t.Errorf("%s: %s's command no longer contains %q:\n%s", tmpl, name, c, command)
				}
			}
		}
	}
	for _, fact := range mcoInstances {
		var found []parsedInstance
		for _, in := range parsed[fact.template].instances {
			if in.kind == fact.kind {
				found = append(found, in)
			}
		}
		if len(found) != 1 {
			t.Errorf("%s: %d %s instances, want 1", fact.template, len(found), fact.kind)
			continue
		}
		if in := found[0]; in.priority != fact.priority || !slices.Equal(in.tracks, fact.tracks) {
			t.Errorf("%s %s: priority %d tracks %v, the facts say %d %v", fact.template, fact.kind, in.priority, in.tracks, fact.priority, fact.tracks)
		}
	}
	for tmpl, p := range parsed {
		want := 0
		for _, fact := range mcoInstances {
			if fact.template == tmpl {
				want++
			}
		}
		if len(p.instances) != want {
			t.Errorf("%s holds %d vrrp_instances, the facts know %d", tmpl, len(p.instances), want)
		}
	}
}

// The parser on a small template of the same shape, so it is tested where
// MCO's files are absent too.
func TestParseKeepalivedTemplate(t *testing.T) {
	text := "global_defs {\n    script_user root\n}\n" +
		"vrrp_script chk_a {\n    script \"/usr/bin/timeout 1.9 /etc/keepalived/a.sh\"\n    interval 2\n    weight 20\n}\n" +
		"vrrp_script chk_b {\n    script \"curl http://localhost:1936/healthz\"\n}\n" +
		"{{`{{ range $i, $config := .Configs }}`}}\n" +
		"vrrp_instance {{`{{ .Cluster.Name }}`}}_API_{{`{{$i}}`}} {\n    priority 40\n" +
		"    {{`{{if .EnableUnicast}}`}}\n    unicast_peer {\n        {{`{{.Address}}`}}\n    }\n    {{`{{end}}`}}\n" +
		"    track_script {\n        chk_a\n        chk_b\n    }\n}\n" +
		"vrrp_instance {{.Cluster.Name}}_INGRESS_{{$i}} {\n    priority 20\n}\n{{`{{ end }}`}}\n"
	p, err := parseKeepalivedTemplate(text)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%v %+v", p.scripts, p.instances)
	want := "map[chk_a:{20 /usr/bin/timeout 1.9 /etc/keepalived/a.sh} chk_b:{0 curl http://localhost:1936/healthz}] " +
		"[{kind:api priority:40 tracks:[chk_a chk_b]} {kind:ingress priority:20 tracks:[]}]"
	if got != want {
		t.Errorf("parsed\n %s\nwant\n %s", got, want)
	}
	if _, err := parseKeepalivedTemplate("vrrp_instance x {\n"); err == nil {
		t.Error("an unclosed block parsed")
	}
}

// health is what a node's checks find.
type health struct {
	name                     string
	lb, apiserver, mcs       bool
	routerAlive, routerReady bool
	defaultRouter            bool
}

// passes says whether MCO's script passes on a node in health h: what the
// script's command (checked above) does.
func (h health) passes(script string) bool {
	switch script {
	case "chk_ocp_lb":
		return h.lb
	case "chk_ocp_both":
		return h.lb || h.apiserver
	case "chk_mcs":
		return h.mcs
	case "chk_ingress":
		return h.routerAlive
	case "chk_ingress_ready":
		return h.routerReady
	case "chk_default_ingress":
		return h.defaultRouter
	}
	panic("unknown script " + script)
}

var healthStates = []health{
	{"all healthy", true, true, true, true, true, true},
	{"LB down", false, false, true, true, true, true},
	{"LB down, apiserver up", false, true, true, true, true, true},
	{"MCS down", true, true, false, true, true, true},
	{"LB and MCS down, apiserver up", false, true, false, true, true, true},
	{"all API checks down", false, false, false, true, true, true},
	{"router alive, not ready", true, true, true, true, false, true},
	{"router ready, not the default one", true, true, true, true, true, false},
	{"router not ready, not the default one", true, true, true, true, false, false},
	{"no router", true, true, true, false, false, false},
	{"router dead, pod still scheduled", true, true, true, false, false, true},
}

// elected is one node's advert: its priority, or FAULT (never elected).
type elected struct {
	prio  int
	fault bool
}

// keepalivedPriority is the priority a keepalived node of MCO's instance
// advertises in health h: the base plus each passing script's positive
// weight; a failing weight-0 script means FAULT.
func keepalivedPriority(in mcoInstance, h health) elected {
	e := elected{prio: in.priority}
	for _, name := range in.tracks {
		s := scriptFact(name)
		switch {
		case s.weight == 0 && !h.passes(name):
			e.fault = true
		case s.weight > 0 && h.passes(name):
			e.prio += s.weight
		case s.weight < 0 && !h.passes(name):
			e.prio += s.weight
		}
	}
	return e
}

func fixed(ok bool) vrrp.Probe {
	return vrrp.FuncProbe(func(context.Context) error {
		if ok {
			return nil
		}
		return errors.New("failing")
	})
}

const compatConfig = `
cluster: {name: ocp4, baseDomain: example.com}
network:
  machineCIDR: 192.168.126.0/24
  apiVIPs: [192.168.126.5]
  ingressVIPs: [192.168.126.6]
nodes:
  - {name: bootstrap, role: bootstrap, ips: [192.168.126.9]}
  - {name: master-0, role: master, ips: [192.168.126.10]}
  - {name: worker-0, role: worker, ips: [192.168.126.20]}
vrrp: {mode: keepalived-openshift}
`

// applianceConfig is the appliance's router of kind on a node of role, with
// probes that answer as health h.
func applianceConfig(t *testing.T, role cluster.Role, kind cluster.VIPKind, h health) vrrp.Config {
	t.Helper()
	cfg := parse(t, compatConfig)
	self := cfg.Nodes[slices.IndexFunc(cfg.Nodes, func(n cluster.Node) bool { return n.Role == role })]
	p := Probes{
		LB:          func(netip.Addr) vrrp.Probe { return fixed(h.lb) },
		APIServer:   fixed(h.apiserver),
		MCS:         fixed(h.mcs),
		IngressPort: fixed(h.routerReady), RouterAlive: fixed(h.routerAlive), DefaultRouter: fixed(h.defaultRouter),
	}
	for _, c := range VRRPConfigs(cfg, self, PlanFor(cfg, role), "eth0", p) {
		if strings.HasPrefix(c.Name, string(kind)+"-") {
			return c
		}
	}
	t.Fatalf("no %s router on a %s", kind, role)
	return vrrp.Config{}
}

// appliancePriority is what the appliance's router advertises in health h,
// by vrrp's own arithmetic (what TrackSet.Adjust applies).
func appliancePriority(t *testing.T, role cluster.Role, kind cluster.VIPKind, h health) elected {
	c := applianceConfig(t, role, kind, h)
	var rs []vrrp.TrackResult
	for _, tr := range c.Tracks {
		rs = append(rs, vrrp.TrackResult{Weight: tr.Weight, Healthy: tr.Probe.Probe(t.Context()) == nil})
	}
	p, fault := vrrp.Effective(c.Priority, rs)
	return elected{prio: int(p), fault: fault}
}

// winner is 1 when a is elected over b, -1 when b is, 0 when neither is
// (both FAULT) or the tie goes to the higher address, which is no matter
// of priorities.
func winner(a, b elected) int {
	switch {
	case a.fault && b.fault:
		return 0
	case b.fault:
		return 1
	case a.fault:
		return -1
	case a.prio > b.prio:
		return 1
	case a.prio < b.prio:
		return -1
	}
	return 0
}

// Each appliance router in keepalived-openshift mode tracks, for each of
// MCO's scripts, the track that mirrors it, with the same weight and the
// same base priority.
func TestCompatTracksMirrorMCO(t *testing.T) {
	all := health{lb: true, apiserver: true, mcs: true, routerAlive: true, routerReady: true, defaultRouter: true}
	for _, fact := range mcoInstances {
		c := applianceConfig(t, fact.role, fact.kind, all)
		if int(c.Priority) != fact.priority {
			t.Errorf("%s %s: base priority %d, MCO's %d", fact.role, fact.kind, c.Priority, fact.priority)
		}
		var want, got []string
		for _, s := range fact.tracks {
			want = append(want, fmt.Sprintf("%s:%d", scriptFact(s).track, scriptFact(s).weight))
		}
		for _, tr := range c.Tracks {
			if fact.role == cluster.RoleBootstrap {
				// Beyond MCO: checks that can only lower the bootstrap.
				if tr.Weight >= 0 {
					t.Errorf("bootstrap track %s has weight %d: it may only step down", tr.Name, tr.Weight)
				}
				continue
			}
			got = append(got, fmt.Sprintf("%s:%d", tr.Name, tr.Weight))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s %s: tracks %v, mirroring MCO's they would be %v", fact.role, fact.kind, got, want)
		}
	}
}

// In every health state, an appliance node advertises what a keepalived
// node of the same role and health advertises, so between any two nodes,
// appliance or keepalived, the same one wins.
func TestCompatElectionsMatchKeepalived(t *testing.T) {
	for _, fact := range mcoInstances {
		if fact.role == cluster.RoleBootstrap {
			continue
		}
		t.Run(string(fact.role)+"-"+string(fact.kind), func(t *testing.T) {
			ka := map[string]elected{}
			app := map[string]elected{}
			for _, h := range healthStates {
				ka[h.name], app[h.name] = keepalivedPriority(fact, h), appliancePriority(t, fact.role, fact.kind, h)
				if ka[h.name] != app[h.name] {
					t.Errorf("%s: keepalived %+v, appliance %+v", h.name, ka[h.name], app[h.name])
				}
			}
			for _, a := range healthStates {
				for _, b := range healthStates {
					want := winner(ka[a.name], ka[b.name])
					for _, pair := range [][2]elected{{app[a.name], app[b.name]}, {app[a.name], ka[b.name]}, {ka[a.name], app[b.name]}} {
						if got := winner(pair[0], pair[1]); got != want {
							t.Errorf("%q against %q: winner %d, two keepalived nodes give %d", a.name, b.name, got, want)
						}
					}
				}
			}
		})
	}
}

// The bootstrap: healthy, it wins over a master in any health, as
// keepalived's 70 does; where keepalived's bootstrap keeps the API VIP
// whatever its health, the appliance's yields once its apiserver fails to
// any master that is not in FAULT, and once its LB fails to every master
// whose LB serves.
func TestCompatBootstrap(t *testing.T) {
	master := mcoInstances[slices.IndexFunc(mcoInstances, func(m mcoInstance) bool {
		return m.role == cluster.RoleMaster && m.kind == cluster.VIPAPI
	})]
	boot := func(lb, apiserver bool) elected {
		return appliancePriority(t, cluster.RoleBootstrap, cluster.VIPAPI, health{lb: lb, apiserver: apiserver})
	}
	for _, h := range healthStates {
		m := keepalivedPriority(master, h)
		if winner(boot(true, true), m) != 1 {
			t.Errorf("a healthy bootstrap (%+v) loses to a master with %s (%+v)", boot(true, true), h.name, m)
		}
		if winner(boot(true, false), m) != -1 {
			t.Errorf("a bootstrap whose apiserver failed (%+v) is not below a master with %s (%+v)", boot(true, false), h.name, m)
		}
		if winner(boot(false, false), m) != -1 {
			t.Errorf("a bootstrap that serves nothing (%+v) is not below a master with %s (%+v)", boot(false, false), h.name, m)
		}
		lbServes := h.lb
		if w := winner(boot(false, true), m); (lbServes && w != -1) || (!lbServes && w != 1) {
			t.Errorf("a bootstrap whose LB cannot serve (%+v) against a master with %s (%+v): winner %d", boot(false, true), h.name, m, w)
		}
	}
}
