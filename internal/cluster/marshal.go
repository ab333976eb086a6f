package cluster

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"sigs.k8s.io/yaml"
)

// Marshal writes the model back as an appliance.yaml, through the same raw
// types Parse reads, so a field added to the schema is read and written
// alike. Every default is spelled out: what Parse filled in is written as if
// the file had said it, so a reader of the result gets exactly this model
// even where a later version would default differently. Parse(Marshal(cfg))
// gives cfg back, without its Provision and Origin.
//
// Left out: the provision section (it names the installer's machine, its
// platform credentials files and caches), Origin (no part of appliance.yaml)
// and, in keepalived-openshift mode, vrrp.authPass (the mode derives it from
// the cluster name and Parse refuses one). What it may still hold is a
// native-mode vrrp.authPass, so whoever writes the result to disk keeps it
// to its owner (0600).
//
// The output is deterministic: keys sorted, lists in the model's order.
func Marshal(cfg *Config) ([]byte, error) {
	if cfg == nil {
		return nil, errors.New("cluster: marshal: no config")
	}
	out, err := yaml.Marshal(toRaw(cfg))
	if err != nil {
		return nil, fmt.Errorf("cluster: marshal: %w", err)
	}
	return out, nil
}

// toRaw is the inverse of validate: the document Parse turns into cfg.
func toRaw(cfg *Config) *rawConfig {
	n, v, d := cfg.Network, cfg.VRRP, cfg.DHCP
	r := &rawConfig{
		Cluster: rawCluster{Name: cfg.Cluster.Name, BaseDomain: cfg.Cluster.BaseDomain},
		Network: rawNetwork{
			// Always the list spelling: it holds one network or two.
			MachineCIDRs:   strs(n.MachineCIDRs),
			Interface:      n.Interface,
			APIVIPs:        strs(n.APIVIPs),
			IngressVIPs:    strs(n.IngressVIPs),
			UpstreamDNS:    strs(n.UpstreamDNS),
			ClusterNetwork: strs(n.ClusterNetworks),
			NodeIPHint:     strs(n.NodeIPHints),
		},
		VRRP: rawVRRP{
			Mode:             v.Mode,
			Transport:        v.Transport,
			Version:          v.Version,
			AdvertInterval:   v.AdvertInterval.String(),
			Preempt:          &v.Preempt,
			PreemptDelay:     durationOrEmpty(v.PreemptDelay),
			APIVRID:          int(v.APIVRID),
			IngressVRID:      int(v.IngressVRID),
			UnicastPeers:     strs(v.UnicastPeers),
			Priority:         v.Priority,
			Enabled:          &v.Enabled,
			IngressHealthURL: v.IngressHealthURL,
		},
		DHCP: rawDHCP{
			Enabled:       &d.Enabled,
			LeaseTime:     durationOrEmpty(d.LeaseTime),
			LeaseFile:     d.LeaseFile,
			DNS:           strs(d.DNS),
			NTP:           strs(d.NTP),
			SearchDomains: d.SearchDomains,
		},
		LB: rawLB{
			Enabled:  &cfg.LB.Enabled,
			Balance:  cfg.LB.Balance,
			MCS:      &cfg.LB.MCS,
			Redirect: &cfg.LB.Redirect,
		},
		DNS: rawDNS{
			Enabled:   &cfg.DNS.Enabled,
			MDNS:      &cfg.DNS.MDNS,
			AllowFrom: strs(cfg.DNS.AllowFrom),
		},
		Admin: rawAdmin{Listen: cfg.Admin.Listen, MetricsPort: cfg.Admin.MetricsPort},
	}
	if n.Gateway.IsValid() {
		r.Network.Gateway = n.Gateway.String()
	}
	if v.Mode != VRRPModeKeepalivedOpenShift {
		r.VRRP.AuthPass = v.AuthPass
	}
	if !d.Pool.IsZero() {
		r.DHCP.Pool = &rawRange{Start: d.Pool.Start.String(), End: d.Pool.End.String()}
	}
	for _, node := range cfg.Nodes {
		rn := rawNode{Name: node.Name, Role: string(node.Role), IPs: strs(node.IPs)}
		if node.MAC != nil {
			rn.MAC = node.MAC.String()
		}
		r.Nodes = append(r.Nodes, rn)
	}
	return r
}

// durationOrEmpty leaves a zero duration out, as the file would say nothing.
func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// strs formats addresses, prefixes and address:port pairs; empty stays nil
// so omitempty leaves the key out.
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
