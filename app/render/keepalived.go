package render

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"appliance/internal/cluster"
)

// Keepalived returns keepalived/ROLE/keepalived.conf for each node role
// that holds a VIP: the virtual routers cluster.Config.VIPInstances gives a
// node of that role (VRIDs, priorities, VRRP version, advert interval,
// authentication, preemption, and the transport: unicast, as the appliance
// and OpenShift's keepalived run by default, from each node's own address
// to the configured nodes that take part and vrrp.unicastPeers), so
// keepalived nodes and `appliance vip` nodes share one VIP. keepalived needs the interface by
// name; when neither network.interface nor Options.Interface gives it, no
// file is written and the returned note says why.
func Keepalived(cfg *cluster.Config, opts Options) ([]File, string) {
	ifc := iface(cfg, opts)
	if ifc == "" {
		return nil, "keepalived: not rendered: network.interface is not set and keepalived needs the interface by name; set it or pass --interface"
	}
	var files []File
	for _, role := range []cluster.Role{cluster.RoleBootstrap, cluster.RoleMaster, cluster.RoleWorker} {
		// Instances of one role differ only in their unicast peers (a
		// node leaves itself out); a role file lists every peer and marks
		// each node's own address for keepalived to skip there.
		ins := cfg.VIPInstances(cluster.Node{Role: role})
		if len(ins) == 0 {
			continue
		}
		var b strings.Builder
		b.WriteString(header("#", cfg, opts, "keepalived configuration for the "+string(role)+" nodes"))
		b.WriteString("# Install it as /etc/keepalived/keepalived.conf on every " + string(role) + " node;\n" +
			"# the VIPs fail over between these nodes and nodes running `appliance vip`.\n")
		if cfg.Unicast() {
			b.WriteString("# Adverts go by unicast to the nodes listed. Lines starting @NAME are read only on\n" +
				"# node NAME, lines starting @^NAME everywhere else: run keepalived with -i NAME\n" +
				"# (the node's name in the config) unless its host name is exactly that.\n")
		}
		fmt.Fprintf(&b, "\nglobal_defs {\n\trouter_id %s_%s\n}\n", cfg.Cluster.Name, role)
		for _, in := range ins {
			fmt.Fprintf(&b, "\nvrrp_instance %s_%s {\n", cfg.Cluster.Name, strings.ReplaceAll(in.Name, "-", "_"))
			fmt.Fprintf(&b, "\tstate BACKUP\n\tinterface %s\n\tversion %d\n\tvirtual_router_id %d\n\tpriority %d\n\tadvert_int %s\n",
				ifc, in.Version, in.VRID, in.Priority, seconds(in.Interval))
			if !in.Preempt {
				b.WriteString("\tnopreempt\n")
			} else if in.PreemptDelay > 0 {
				fmt.Fprintf(&b, "\tpreempt_delay %s\n", seconds(in.PreemptDelay))
			}
			if in.AuthPass != "" {
				fmt.Fprintf(&b, "\tauthentication {\n\t\tauth_type PASS\n\t\tauth_pass %s\n\t}\n", in.AuthPass)
			}
			if in.Unicast {
				// Each node sends from the address the others know it
				// by; for IPv6, keepalived would otherwise use the
				// link-local one, which no peer lists.
				for _, n := range cfg.Nodes {
					if n.Role != role {
						continue
					}
					for _, a := range n.IPs {
						if a.Is6() == in.VIP.Addr().Is6() {
							fmt.Fprintf(&b, "\t@%s unicast_src_ip %s\n", n.Name, a)
							break
						}
					}
				}
			}
			if in.Unicast && len(in.UnicastPeers) == 0 {
				b.WriteString("\t# unicast, but no node of this role and family is configured: add nodes or vrrp.unicastPeers\n")
			}
			if in.Unicast && len(in.UnicastPeers) > 0 {
				b.WriteString("\tunicast_peer {\n")
				for _, p := range in.UnicastPeers {
					// "@^NAME line": keepalived skips the line on the node
					// whose config-id (-i, default the host name) is NAME,
					// so no node sends adverts to itself.
					if n, ok := cfg.NodeByAddr(p); ok && n.Role == role {
						fmt.Fprintf(&b, "\t\t@^%s %s\n", n.Name, p)
						continue
					}
					fmt.Fprintf(&b, "\t\t%s\n", p)
				}
				b.WriteString("\t}\n")
			}
			fmt.Fprintf(&b, "\tvirtual_ipaddress {\n\t\t%s\n\t}\n}\n", in.VIP)
		}
		files = append(files, File{Path: "keepalived/" + string(role) + "/keepalived.conf", Data: []byte(b.String()), Secret: true})
	}
	return files, ""
}

// seconds writes d as keepalived's decimal seconds ("1", "0.1").
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}
