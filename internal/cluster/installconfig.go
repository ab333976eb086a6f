package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// icPlatforms are the install-config platforms whose clusters carry their
// own VIPs, in the order they are looked for.
var icPlatforms = []string{"baremetal", "ovirt", "vsphere", "openstack", "nutanix", "none"}

// icDefaultMachineNetwork is what the installer assumes when
// networking.machineNetwork is left out.
const icDefaultMachineNetwork = "10.0.0.0/16"

// icDoc is the part of an install-config.yaml the model is built from; the
// rest (pullSecret, sshKey, compute, ...) is ignored.
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
		MachineCIDR string `json:"machineCIDR"` // older installers
	} `json:"networking"`
	ControlPlane struct {
		Replicas *int64 `json:"replicas"`
	} `json:"controlPlane"`
	Platform struct {
		Baremetal *icPlatform `json:"baremetal"`
		Ovirt     *icPlatform `json:"ovirt"`
		VSphere   *icPlatform `json:"vsphere"`
		OpenStack *icPlatform `json:"openstack"`
		Nutanix   *icPlatform `json:"nutanix"`
		None      *icPlatform `json:"none"`
	} `json:"platform"`
}

type icPlatform struct {
	APIVIPs     []string `json:"apiVIPs"`
	IngressVIPs []string `json:"ingressVIPs"`
	APIVIP      string   `json:"apiVIP"`     // deprecated singular form
	IngressVIP  string   `json:"ingressVIP"` // deprecated singular form
	Hosts       []icHost `json:"hosts"`      // baremetal only
}

type icHost struct {
	Name           string `json:"name"`
	Role           string `json:"role"`
	BootMACAddress string `json:"bootMACAddress"`
	NetworkConfig  any    `json:"networkConfig"` // an nmstate document
}

func (d *icDoc) platform(name string) *icPlatform {
	switch name {
	case "baremetal":
		return d.Platform.Baremetal
	case "ovirt":
		return d.Platform.Ovirt
	case "vsphere":
		return d.Platform.VSphere
	case "openstack":
		return d.Platform.OpenStack
	case "nutanix":
		return d.Platform.Nutanix
	}
	return d.Platform.None
}

// ParseInstallConfig builds the model from an installer install-config.yaml:
// metadata.name, baseDomain, networking.machineNetwork (the installer's
// default 10.0.0.0/16 when absent, or the older networking.machineCIDR), the
// platform's apiVIPs/ingressVIPs (or the older apiVIP/ingressVIP), and for
// baremetal the hosts (name, role, bootMACAddress, and the addresses in their
// nmstate networkConfig that fall inside the machine network). Hosts without
// a role fill the control plane (controlPlane.replicas, default 3) in order,
// then become workers, as the installer assigns them. Unknown fields are
// ignored; VRRP and admin settings take their defaults. The result is
// validated like Parse's, with problems named in install-config terms.
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

	var pre []ranked // problems found while translating, already in install-config terms
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

	platforms, _ := top["platform"].(map[string]any)
	var found []string
	for _, name := range icPlatforms {
		if _, ok := platforms[name]; ok {
			found = append(found, name)
		}
	}
	switch {
	case len(found) == 1:
		m.platform = "platform." + found[0]
	case len(found) > 1:
		addPre("platform", "sets %s; an install-config has one platform", strings.Join(found, " and "))
		m.platform = "platform." + found[0]
	case len(platforms) > 0:
		other := slices.Sorted(maps.Keys(platforms))
		addPre("platform."+other[0], "the appliance serves clusters that bring their own VIPs; want one of %s", strings.Join(icPlatforms, ", "))
	default:
		addPre("platform", "required: one of %s, with apiVIPs", strings.Join(icPlatforms, ", "))
	}

	if len(found) > 0 {
		p := doc.platform(found[0])
		if p == nil {
			p = &icPlatform{}
		}
		raw.Network.APIVIPs, m.apiSingular = icVIPs(p.APIVIPs, p.APIVIP, m.platform, "apiVIP", addPre)
		raw.Network.IngressVIPs, m.ingressSingular = icVIPs(p.IngressVIPs, p.IngressVIP, m.platform, "ingressVIP", addPre)
		masters := int64(3)
		if doc.ControlPlane.Replicas != nil {
			masters = *doc.ControlPlane.Replicas
		}
		for _, h := range p.Hosts {
			if h.Role == string(RoleMaster) {
				masters--
			}
		}
		for _, h := range p.Hosts {
			n := rawNode{Name: h.Name, Role: h.Role, MAC: h.BootMACAddress, IPs: nmstateIPs(h.NetworkConfig, raw.Network.MachineCIDRs)}
			if n.Role == "" {
				n.Role = string(RoleWorker)
				if masters > 0 {
					n.Role, masters = string(RoleMaster), masters-1
				}
			}
			raw.Nodes = append(raw.Nodes, n)
		}
	}

	v := newValidator(m.translate)
	v.problems = pre
	if len(found) == 0 {
		// Without a platform there is nowhere VIPs could have been given;
		// the platform problem above says what to do.
		v.bad = append(v.bad, "network.apiVIPs", "network.ingressVIPs")
	}
	cfg = v.validate(&raw)
	if err := v.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// icVIPs merges the list and the deprecated singular form of a VIP setting.
func icVIPs(list []string, single, platform, singleKey string, add func(path, format string, args ...any)) ([]string, bool) {
	switch {
	case len(list) == 0 && single != "":
		return []string{single}, true
	case len(list) > 0 && single != "" && single != list[0]:
		add(platform+"."+singleKey, "%s differs from %ss[0] (%s); remove the deprecated %s", single, singleKey, list[0], singleKey)
	}
	return list, false
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
	machine                      string // where machine networks were read
	platform                     string // "platform.baremetal"
	apiSingular, ingressSingular bool
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
	case strings.HasPrefix(p, "network.apiVIPs"):
		return m.vip(p, "network.apiVIPs", "apiVIP", m.apiSingular)
	case strings.HasPrefix(p, "network.ingressVIPs"):
		return m.vip(p, "network.ingressVIPs", "ingressVIP", m.ingressSingular)
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

func (m icPaths) vip(p, model, key string, singular bool) string {
	rest := strings.TrimPrefix(p, model)
	if singular && rest != "" {
		return m.platform + "." + key
	}
	return m.platform + "." + key + "s" + rest
}
