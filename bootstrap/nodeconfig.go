package bootstrap

import (
	"fmt"
	"net/netip"
	"time"

	"sigs.k8s.io/yaml"

	"appliance/internal/cluster"
)

// nodeDoc mirrors appliance.yaml as internal/cluster reads it; only what a
// node needs is written. The provision section stays behind: it names the
// installer machine's platform, credentials files and caches, none of which
// a node has any use for.
type nodeDoc struct {
	Cluster nodeCluster `json:"cluster"`
	Network nodeNetwork `json:"network"`
	Nodes   []nodeNode  `json:"nodes,omitempty"`
	VRRP    nodeVRRP    `json:"vrrp"`
	DHCP    nodeDHCP    `json:"dhcp"`
	LB      nodeLB      `json:"lb"`
	DNS     nodeDNS     `json:"dns"`
	Admin   nodeAdmin   `json:"admin"`
}

type nodeCluster struct {
	Name       string `json:"name"`
	BaseDomain string `json:"baseDomain"`
}

type nodeNetwork struct {
	MachineCIDRs []string `json:"machineCIDRs"`
	Interface    string   `json:"interface,omitempty"`
	Gateway      string   `json:"gateway,omitempty"`
	APIVIPs      []string `json:"apiVIPs,omitempty"`
	IngressVIPs  []string `json:"ingressVIPs,omitempty"`
	UpstreamDNS  []string `json:"upstreamDNS,omitempty"`
	// Always written, so a node answers the pod networks the installer's
	// machine validated, defaults included.
	ClusterNetwork []string `json:"clusterNetwork"`
	NodeIPHint     []string `json:"nodeIPHint"`
}

type nodeNode struct {
	Name string   `json:"name"`
	Role string   `json:"role"`
	MAC  string   `json:"mac,omitempty"`
	IPs  []string `json:"ips,omitempty"`
}

type nodeVRRP struct {
	Enabled          bool     `json:"enabled"`
	Mode             string   `json:"mode"`
	Transport        string   `json:"transport"`
	Version          int      `json:"version"`
	AdvertInterval   string   `json:"advertInterval"`
	Preempt          bool     `json:"preempt"`
	PreemptDelay     string   `json:"preemptDelay,omitempty"`
	APIVRID          int      `json:"apiVRID,omitempty"`
	IngressVRID      int      `json:"ingressVRID,omitempty"`
	AuthPass         string   `json:"authPass,omitempty"`
	UnicastPeers     []string `json:"unicastPeers,omitempty"`
	Priority         int      `json:"priority,omitempty"`
	IngressHealthURL string   `json:"ingressHealthURL,omitempty"`
}

type nodeDHCP struct {
	Enabled       bool       `json:"enabled"`
	LeaseTime     string     `json:"leaseTime,omitempty"`
	LeaseFile     string     `json:"leaseFile,omitempty"`
	Pool          *nodeRange `json:"pool,omitempty"`
	DNS           []string   `json:"dns,omitempty"`
	NTP           []string   `json:"ntp,omitempty"`
	SearchDomains []string   `json:"searchDomains,omitempty"`
}

type nodeRange struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

type nodeLB struct {
	Enabled  bool   `json:"enabled"`
	Balance  string `json:"balance,omitempty"`
	MCS      bool   `json:"mcs"`
	Redirect bool   `json:"redirect"`
}

type nodeDNS struct {
	Enabled   bool     `json:"enabled"`
	MDNS      bool     `json:"mdns"`
	AllowFrom []string `json:"allowFrom,omitempty"`
}

type nodeAdmin struct {
	Listen string `json:"listen,omitempty"`
}

// NodeConfig is the appliance.yaml a node is given: the validated model
// written back in appliance.yaml's own schema, every default spelled out, so
// a node reads exactly what the installer's machine validated whether the
// input was an appliance.yaml or an install-config.yaml (whose pull secret
// and SSH key never reach the file). What it still may hold is
// vrrp.authPass, so the file is written 0600 (see NodeConfigMode).
func NodeConfig(cfg *cluster.Config) ([]byte, error) {
	if cfg == nil {
		return nil, fmt.Errorf("bootstrap: no cluster config")
	}
	v := cfg.VRRP
	d := nodeDoc{
		Cluster: nodeCluster{Name: cfg.Cluster.Name, BaseDomain: cfg.Cluster.BaseDomain},
		Network: nodeNetwork{
			MachineCIDRs: strs(cfg.Network.MachineCIDRs),
			Interface:    cfg.Network.Interface,
			APIVIPs:      strs(cfg.Network.APIVIPs),
			IngressVIPs:  strs(cfg.Network.IngressVIPs),
			UpstreamDNS:  strs(cfg.Network.UpstreamDNS),
			// ClusterNetwork and NodeIPHint are never empty after Parse.
			ClusterNetwork: strs(cfg.Network.ClusterNetworks),
			NodeIPHint:     strs(cfg.Network.NodeIPHints),
		},
		VRRP: nodeVRRP{
			Enabled:          v.Enabled,
			Mode:             v.Mode,
			Transport:        v.Transport,
			Version:          v.Version,
			AdvertInterval:   v.AdvertInterval.String(),
			Preempt:          v.Preempt,
			PreemptDelay:     durationOrEmpty(v.PreemptDelay),
			APIVRID:          int(v.APIVRID),
			IngressVRID:      int(v.IngressVRID),
			UnicastPeers:     strs(v.UnicastPeers),
			Priority:         v.Priority,
			IngressHealthURL: v.IngressHealthURL,
		},
		DHCP: nodeDHCP{
			Enabled:       cfg.DHCP.Enabled,
			LeaseTime:     durationOrEmpty(cfg.DHCP.LeaseTime),
			LeaseFile:     cfg.DHCP.LeaseFile,
			DNS:           strs(cfg.DHCP.DNS),
			NTP:           strs(cfg.DHCP.NTP),
			SearchDomains: cfg.DHCP.SearchDomains,
		},
		LB:    nodeLB{Enabled: cfg.LB.Enabled, Balance: cfg.LB.Balance, MCS: cfg.LB.MCS, Redirect: cfg.LB.Redirect},
		DNS:   nodeDNS{Enabled: cfg.DNS.Enabled, MDNS: cfg.DNS.MDNS, AllowFrom: strs(cfg.DNS.AllowFrom)},
		Admin: nodeAdmin{Listen: cfg.Admin.Listen},
	}
	if cfg.Network.Gateway.IsValid() {
		d.Network.Gateway = cfg.Network.Gateway.String()
	}
	// In keepalived-openshift mode the password is derived from the cluster
	// name and the file may not carry one.
	if v.Mode != cluster.VRRPModeKeepalivedOpenShift {
		d.VRRP.AuthPass = v.AuthPass
	}
	if !cfg.DHCP.Pool.IsZero() {
		d.DHCP.Pool = &nodeRange{Start: cfg.DHCP.Pool.Start.String(), End: cfg.DHCP.Pool.End.String()}
	}
	for _, n := range cfg.Nodes {
		nn := nodeNode{Name: n.Name, Role: string(n.Role), IPs: strs(n.IPs)}
		if n.MAC != nil {
			nn.MAC = n.MAC.String()
		}
		d.Nodes = append(d.Nodes, nn)
	}
	out, err := yaml.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: write the node's appliance.yaml: %w", err)
	}
	return append([]byte(nodeConfigHeader), out...), nil
}

// nodeConfigHeader tells whoever opens the file on a node where it came from.
const nodeConfigHeader = "# Written by `appliance ignition` / `appliance manifests` from the installer's config;\n" +
	"# edit the source and run them again rather than this copy.\n"

func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// strs formats addresses, prefixes and address:port pairs; nil stays nil so
// omitempty leaves the key out.
func strs[T interface {
	netip.Addr | netip.Prefix | netip.AddrPort
	String() string
}](xs []T) []string {
	if len(xs) == 0 {
		return nil
	}
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}
