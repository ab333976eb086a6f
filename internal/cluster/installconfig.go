package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// icVIPFields are the names an install-config gives a platform's VIPs, spelt
// as the installer's platform types spell them (oVirt alone in snake case).
// The single-address forms are deprecated; the installer still reads them.
type icVIPFields struct {
	api, ingress             string // lists, one VIP per address family
	apiSingle, ingressSingle string // deprecated single addresses
}

var (
	icCamel = icVIPFields{api: "apiVIPs", ingress: "ingressVIPs", apiSingle: "apiVIP", ingressSingle: "ingressVIP"}
	icSnake = icVIPFields{api: "api_vips", ingress: "ingress_vips", apiSingle: "api_vip", ingressSingle: "ingress_vip"}
)

// icPlatforms are the install-config platforms whose nodes hold the
// cluster's VIPs (keepalived on an OpenShift install), with their spelling.
var icPlatforms = map[string]icVIPFields{
	"baremetal": icCamel,
	"nutanix":   icCamel,
	"openstack": icCamel,
	"ovirt":     icSnake,
	"vsphere":   icCamel,
}

// icPlatformList names icPlatforms for messages.
const icPlatformList = "baremetal, nutanix, openstack, ovirt or vsphere"

// icDefaultMachineNetwork is what the installer assumes when
// networking.machineNetwork is left out.
const icDefaultMachineNetwork = "10.0.0.0/16"

// icOpenStackAPIHost and icOpenStackIngressHost are the hosts of the first
// machine network that the installer makes an openstack cluster's VIPs when
// the install-config gives none.
const (
	icOpenStackAPIHost     = 5
	icOpenStackIngressHost = 7
)

// icDoc is the part of an install-config.yaml the model is built from; the
// rest (pullSecret, sshKey, compute, ...) is ignored. The platform's VIPs are
// read from the document tree, since their names depend on the platform.
type icDoc struct {
	APIVersion string `json:"apiVersion"`
	BaseDomain string `json:"baseDomain"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Networking struct {
		MachineNetwork []struct {
			CIDR string `json:"cidr"`
		} `json:"machineNetwork"`
		MachineCIDR    string `json:"machineCIDR"` // older installers
		ClusterNetwork []struct {
			CIDR string `json:"cidr"`
		} `json:"clusterNetwork"`
	} `json:"networking"`
	ControlPlane struct {
		Replicas *int64 `json:"replicas"`
	} `json:"controlPlane"`
	Platform struct {
		// Only baremetal hosts carry names and MACs; vSphere's static-IP
		// hosts are named by the installer at install time, so their
		// members come from mDNS or the Kubernetes API instead.
		Baremetal *struct {
			Hosts []icHost `json:"hosts"`
		} `json:"baremetal"`
	} `json:"platform"`
}

type icHost struct {
	Name           string `json:"name"`
	Role           string `json:"role"`
	BootMACAddress string `json:"bootMACAddress"`
	NetworkConfig  any    `json:"networkConfig"` // an nmstate document
}

// ParseInstallConfig builds the model from an installer install-config.yaml:
// metadata.name, baseDomain, networking.machineNetwork (the installer's
// default 10.0.0.0/16 when absent, or the older networking.machineCIDR), the
// platform's VIPs under the names the installer gives them (apiVIPs and
// ingressVIPs, or api_vips and ingress_vips on ovirt, or their deprecated
// single forms; on openstack the installer's defaults, hosts 5 and 7 of the
// first machine network, when none are given), and for baremetal the hosts
// (name, role, bootMACAddress, and the addresses in their nmstate
// networkConfig that fall inside the machine network). Hosts without a role
// fill the control plane (controlPlane.replicas, default 3) in order, then
// become workers, as the installer assigns them. Unknown fields are ignored;
// VRRP and admin settings take their defaults. The result is validated like
// Parse's, with problems named in install-config terms. A platform whose
// install-config carries no VIPs (none, external, the clouds) is refused with
// what to write in an appliance.yaml instead.
func ParseInstallConfig(data []byte) (cfg *Config, err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg, err = nil, docError("cannot read the document: %v", r)
		}
	}()
	if len(data) > maxConfigSize {
		return nil, docError("the document is %d bytes; a configuration is at most %d", len(data), maxConfigSize)
	}
	tree, err := yamlTree(data)
	if err != nil {
		return nil, docError("not valid YAML: %s", oneLine(err.Error()))
	}
	top, ok := tree.(map[string]any)
	if !ok {
		return nil, docError("want a mapping at the top level (apiVersion, metadata, platform, ...), got %s", describe(tree))
	}
	var doc icDoc
	if err := yaml.Unmarshal(data, &doc); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, &ValidationError{Problems: []Problem{{Path: te.Field, Message: fmt.Sprintf("want %s, got %s", kindName(te.Type.String()), jsonKind(te.Value))}}}
		}
		return nil, docError("cannot decode: %s", oneLine(err.Error()))
	}

	var pre []ranked   // problems found while translating, already in install-config terms
	var quiet []string // model paths those problems already cover
	addPre := func(path, format string, args ...any) {
		pre = append(pre, ranked{Problem{Path: path, Message: fmt.Sprintf(format, args...)}, 0})
	}
	if doc.APIVersion != "v1" {
		addPre("apiVersion", "%q is not an install-config version (want v1)", doc.APIVersion)
	}

	raw := rawConfig{Cluster: rawCluster{Name: doc.Metadata.Name, BaseDomain: doc.BaseDomain}}
	m := icPaths{machine: "networking.machineNetwork"}

	switch {
	case len(doc.Networking.MachineNetwork) > 0:
		for _, n := range doc.Networking.MachineNetwork {
			raw.Network.MachineCIDRs = append(raw.Network.MachineCIDRs, n.CIDR)
		}
	case doc.Networking.MachineCIDR != "":
		raw.Network.MachineCIDRs = []string{doc.Networking.MachineCIDR}
		m.machine = "networking.machineCIDR"
	default:
		raw.Network.MachineCIDRs = []string{icDefaultMachineNetwork}
		m.machine = "networking.machineNetwork (the installer's default " + icDefaultMachineNetwork + ")"
	}

	for _, n := range doc.Networking.ClusterNetwork {
		raw.Network.ClusterNetwork = append(raw.Network.ClusterNetwork, n.CIDR)
	}

	// The installer decodes with encoding/json, which matches names
	// regardless of case; so does this, keeping the document's spelling
	// in paths.
	name, key, sec := "", "", any(nil)
	platforms, _ := top["platform"].(map[string]any)
	switch keys := slices.Sorted(maps.Keys(platforms)); {
	case top["platform"] != nil && platforms == nil:
		addPre("platform", "want a mapping with one platform (%s), got %s", icPlatformList, describe(top["platform"]))
	case len(keys) == 0:
		addPre("platform", "required: one of %s, with the cluster's VIPs; %s", icPlatformList, icApplianceHint(&raw))
	case len(keys) > 1:
		for i, k := range keys {
			keys[i] = joinPath("", k)
		}
		addPre("platform", "sets %s; an install-config has one platform", strings.Join(keys, " and "))
	default:
		key, sec = keys[0], platforms[keys[0]]
		name = strings.ToLower(key)
	}
	if key != "" {
		m.platform = joinPath("platform", key)
	}

	fields, onPrem := icPlatforms[name]
	switch {
	case key == "":
	case name == "none":
		// kcli and user-provisioned installs: the installer refuses VIPs
		// under platform none, so they can only come from appliance.yaml.
		addPre(m.platform, "platform none gives the cluster no VIPs (the installer refuses apiVIPs there); %s", icApplianceHint(&raw))
	case !onPrem:
		addPre(m.platform, "platform %s gives the cluster no VIPs in an install-config (only %s do); %s", joinPath("", key), icPlatformList, icApplianceHint(&raw))
	default:
		s, isMap := sec.(map[string]any)
		if sec != nil && !isMap {
			addPre(m.platform, "want a mapping (%s, %s, ...), got %s", fields.api, fields.ingress, describe(sec))
			quiet = append(quiet, "network.apiVIPs", "network.ingressVIPs")
			break
		}
		wrongAPI, wrongIngress := icMisspelt(s, m.platform, name, fields, addPre)
		var okAPI, okIngress bool
		raw.Network.APIVIPs, m.api, okAPI = icVIPs(s, m.platform, fields.api, fields.apiSingle, addPre)
		raw.Network.IngressVIPs, m.ingress, okIngress = icVIPs(s, m.platform, fields.ingress, fields.ingressSingle, addPre)
		// A misspelt setting is reported above; "required" would only repeat it.
		if !okAPI || wrongAPI && len(raw.Network.APIVIPs) == 0 {
			quiet = append(quiet, "network.apiVIPs")
			okAPI = false
		}
		if !okIngress || wrongIngress && len(raw.Network.IngressVIPs) == 0 {
			quiet = append(quiet, "network.ingressVIPs")
			okIngress = false
		}
		if name == "openstack" && !icUserManagedLB(s) {
			if len(raw.Network.APIVIPs) == 0 && okAPI {
				raw.Network.APIVIPs, m.api.note = icHostOf(raw.Network.MachineCIDRs, icOpenStackAPIHost, m.machine)
			}
			if len(raw.Network.IngressVIPs) == 0 && okIngress {
				raw.Network.IngressVIPs, m.ingress.note = icHostOf(raw.Network.MachineCIDRs, icOpenStackIngressHost, m.machine)
			}
		}
		if name == "baremetal" && doc.Platform.Baremetal != nil {
			raw.Nodes = icNodes(doc.Platform.Baremetal.Hosts, doc.ControlPlane.Replicas, raw.Network.MachineCIDRs)
		}
	}

	v := newValidator(m.translate)
	v.problems = pre
	if !onPrem {
		// Without a platform that carries VIPs there is nowhere they could
		// have been given; the platform problem above says what to do.
		quiet = append(quiet, "network.apiVIPs", "network.ingressVIPs")
	}
	v.bad = append(v.bad, quiet...)
	cfg = v.validate(&raw)
	if err := v.err(); err != nil {
		return nil, err
	}
	cfg.Origin = &InstallConfigOrigin{Platform: name}
	if s, ok := sec.(map[string]any); ok {
		cfg.Origin.UserManagedLB = icUserManagedLB(s)
	}
	return cfg, nil
}

// icNodes turns baremetal hosts into nodes. Hosts without a role fill the
// control plane first, as the installer assigns them.
func icNodes(hosts []icHost, replicas *int64, cidrs []string) []rawNode {
	masters := int64(3)
	if replicas != nil {
		masters = *replicas
	}
	for _, h := range hosts {
		if h.Role == string(RoleMaster) {
			masters--
		}
	}
	var nodes []rawNode
	for _, h := range hosts {
		n := rawNode{Name: h.Name, Role: h.Role, MAC: h.BootMACAddress, IPs: nmstateIPs(h.NetworkConfig, cidrs)}
		if n.Role == "" {
			n.Role = string(RoleWorker)
			if masters > 0 {
				n.Role, masters = string(RoleMaster), masters-1
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// icVIPPath says where in the install-config one VIP setting was read.
type icVIPPath struct {
	list, single string // full paths of the list and of the deprecated single form
	fromSingle   bool   // the addresses came from the single form
	note         string // set when the installer's default was used
}

// icKey finds a field as encoding/json does: the exact name, else one that
// differs only in case. It returns the document's spelling.
func icKey(m map[string]any, name string) (string, any) {
	if v, ok := m[name]; ok {
		return name, v
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.EqualFold(k, name) {
			return k, m[k]
		}
	}
	return "", nil
}

// icVIPs reads one VIP setting of a platform section: the list and its
// deprecated single form. As the installer does, a single form that is one
// of the list's addresses is accepted, and one that is not is refused. ok is
// false when a problem was reported that covers the setting.
func icVIPs(sec map[string]any, at, listName, singleName string, add func(path, format string, args ...any)) (vips []string, where icVIPPath, ok bool) {
	lk, lv := icKey(sec, listName)
	sk, sv := icKey(sec, singleName)
	where = icVIPPath{list: joinPath(at, listName), single: joinPath(at, singleName)}
	if lk != "" {
		where.list = joinPath(at, lk)
	}
	if sk != "" {
		where.single = joinPath(at, sk)
	}
	ok = true
	switch l := lv.(type) {
	case nil:
	case []any:
		for i, e := range l {
			s, isText := e.(string)
			if !isText && e != nil {
				add(fmt.Sprintf("%s[%d]", where.list, i), "want an IP address, got %s", describe(e))
				ok = false
				continue
			}
			vips = append(vips, s)
		}
	default:
		hint := ""
		if t, isText := lv.(string); isText {
			hint = fmt.Sprintf(" (write [%s])", icShow(t))
		}
		add(where.list, "want a list of IP addresses, one per address family, got %s%s", describe(lv), hint)
		ok = false
	}
	single := ""
	switch s := sv.(type) {
	case nil:
	case string:
		single = s
	default:
		add(where.single, "want a single IP address, got %s (several go in %s)", describe(sv), where.list)
		return vips, where, false
	}
	switch {
	case single == "":
	case !ok:
		// The list's own problem is reported; comparing with it adds noise.
	case len(vips) == 0:
		where.fromSingle = true
		return []string{single}, where, true
	case !slices.ContainsFunc(vips, func(v string) bool { return sameAddr(v, single) }):
		shown := make([]string, len(vips))
		for i, v := range vips {
			shown[i] = icShow(v)
		}
		add(where.single, "%s is not in %s (%s); %s is the deprecated form of %s: remove it, or make it one of those addresses",
			icShow(single), where.list, strings.Join(shown, ", "), joinPath("", sk), joinPath("", lk))
	}
	return vips, where, ok
}

// icShow echoes a written address: as an address when it parses, else
// quoted and short, so a message stays one readable line.
func icShow(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.String()
	}
	return strconv.Quote(short(s))
}

// sameAddr compares two written addresses, as addresses when both parse.
func sameAddr(a, b string) bool {
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	if errX == nil && errY == nil {
		return x == y
	}
	return a == b
}

// icMisspelt reports VIP fields spelt as another platform spells them (the
// installer refuses them as unknown; ignoring them would leave the user
// wondering why their VIPs are "required"), and says which settings were.
func icMisspelt(sec map[string]any, at, platform string, own icVIPFields, add func(path, format string, args ...any)) (api, ingress bool) {
	other := icSnake
	if own == icSnake {
		other = icCamel
	}
	for _, p := range []struct {
		wrong, right string
		api          bool
	}{{other.api, own.api, true}, {other.apiSingle, own.apiSingle, true}, {other.ingress, own.ingress, false}, {other.ingressSingle, own.ingressSingle, false}} {
		if k, _ := icKey(sec, p.wrong); k != "" {
			add(joinPath(at, k), "the %s platform spells this %s; rename it (the installer refuses %s here)", platform, p.right, joinPath("", k))
			api, ingress = api || p.api, ingress || !p.api
		}
	}
	return api, ingress
}

// icUserManagedLB reports whether an openstack section brings its own load
// balancer (loadBalancer.type: UserManaged), in which case the installer
// derives no VIPs.
func icUserManagedLB(sec map[string]any) bool {
	_, lb := icKey(sec, "loadBalancer")
	lbm, _ := lb.(map[string]any)
	_, t := icKey(lbm, "type")
	return t == "UserManaged"
}

// icHostOf returns host n of the first machine network, as the installer
// derives an openstack VIP, and the note naming where it came from. A machine
// network that does not parse yields nothing; that problem is reported
// under its own path.
func icHostOf(cidrs []string, n int, machine string) ([]string, string) {
	if len(cidrs) == 0 {
		return nil, ""
	}
	p, err := netip.ParsePrefix(cidrs[0])
	if err != nil {
		return nil, ""
	}
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	if !a.IsValid() || !p.Contains(a) {
		return nil, ""
	}
	first := strings.TrimSuffix(machine, " (the installer's default "+icDefaultMachineNetwork+")")
	if first == "networking.machineNetwork" {
		first += "[0]"
	}
	return []string{a.String()}, fmt.Sprintf(" (the installer's default: host %d of %s)", n, first)
}

// icApplianceHint says what to write for a cluster whose install-config
// cannot give the VIPs: an appliance.yaml, with what this file already says.
func icApplianceHint(raw *rawConfig) string {
	var have []string
	if isDNSLabel(raw.Cluster.Name) {
		have = append(have, "cluster.name: "+raw.Cluster.Name)
	}
	if isDNSName(raw.Cluster.BaseDomain) {
		have = append(have, "cluster.baseDomain: "+raw.Cluster.BaseDomain)
	}
	var cidrs []string
	for _, c := range raw.Network.MachineCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			cidrs = append(cidrs, p.String())
		}
	}
	if len(cidrs) > 0 {
		have = append(have, "network.machineCIDRs: ["+strings.Join(cidrs, ", ")+"]")
	}
	hint := "write an appliance.yaml instead, with network.apiVIPs, network.ingressVIPs and nodes (name, role, mac, ips)"
	if len(have) > 0 {
		hint += ", and from this file " + strings.Join(have, ", ")
	}
	return hint
}

// kindName turns a Go type into words for a person editing YAML.
func kindName(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case t == "string":
		return "a single value"
	case strings.HasPrefix(t, "map[") || strings.HasPrefix(t, "struct") || strings.HasPrefix(t, "cluster."):
		return "a mapping"
	}
	return t
}

// jsonKind names a JSON value kind as encoding/json reports it, in YAML terms.
func jsonKind(v string) string {
	switch {
	case v == "string":
		return "text"
	case v == "array":
		return "a list"
	case v == "object":
		return "a mapping"
	case strings.HasPrefix(v, "number"):
		return "the " + v
	}
	return v
}

// nmstateIPs collects the static addresses of an nmstate document
// (interfaces[].ipv4|ipv6.address[].ip) that lie inside a machine network; the
// others (storage networks, link-local) are not the node's cluster address.
func nmstateIPs(doc any, cidrs []string) []string {
	var nets []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			nets = append(nets, p.Masked())
		}
	}
	var out []string
	root, _ := doc.(map[string]any)
	ifaces, _ := root["interfaces"].([]any)
	for _, i := range ifaces {
		iface, _ := i.(map[string]any)
		for _, fam := range []string{"ipv4", "ipv6"} {
			cfg, _ := iface[fam].(map[string]any)
			addrs, _ := cfg["address"].([]any)
			for _, a := range addrs {
				am, _ := a.(map[string]any)
				s, _ := am["ip"].(string)
				ip, err := netip.ParseAddr(s)
				if err != nil || slices.Contains(out, ip.String()) {
					continue
				}
				for _, n := range nets {
					if n.Contains(ip) {
						out = append(out, ip.String())
						break
					}
				}
			}
		}
	}
	return out
}

// icPaths renames model paths to the install-config fields they came from.
type icPaths struct {
	machine      string // where machine networks were read
	platform     string // "platform.baremetal"
	api, ingress icVIPPath
}

var nodePath = regexp.MustCompile(`^nodes\[(\d+)\](.*)$`)

func (m icPaths) translate(p string) string {
	switch {
	case p == "cluster.name":
		return "metadata.name"
	case p == "cluster.baseDomain":
		return "baseDomain"
	case strings.HasPrefix(p, "network.machineCIDRs"):
		rest := strings.TrimPrefix(p, "network.machineCIDRs")
		if m.machine != "networking.machineNetwork" || rest == "" {
			return m.machine
		}
		return m.machine + rest + ".cidr"
	case strings.HasPrefix(p, "network.clusterNetwork["):
		return "networking." + strings.TrimPrefix(p, "network.") + ".cidr"
	case p == "network.clusterNetwork":
		return "networking.clusterNetwork"
	case strings.HasPrefix(p, "network.apiVIPs"):
		return m.api.path(strings.TrimPrefix(p, "network.apiVIPs"))
	case strings.HasPrefix(p, "network.ingressVIPs"):
		return m.ingress.path(strings.TrimPrefix(p, "network.ingressVIPs"))
	}
	if sub := nodePath.FindStringSubmatch(p); sub != nil {
		host := m.platform + ".hosts[" + sub[1] + "]"
		switch rest := sub[2]; {
		case rest == ".mac":
			return host + ".bootMACAddress"
		case strings.HasPrefix(rest, ".ips"):
			return host + ".networkConfig"
		default:
			return host + rest
		}
	}
	return p
}

// path names the field behind the model's VIP list, or behind one of its
// entries (rest is "[i]").
func (w icVIPPath) path(rest string) string {
	if w.fromSingle && rest != "" {
		return w.single
	}
	return w.list + rest + w.note
}
