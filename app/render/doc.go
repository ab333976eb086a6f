// Package render owns `appliance render`: it turns a validated cluster config
// into the configuration files of the programs a site runs when it keeps its
// own network services (BIND, dnsmasq, haproxy, keepalived, /etc/hosts), and
// writes them into one folder at once.
//
// The files say what the appliance's own services do from the same config:
// the DNS records are dnsserver.ConfigRecords (the cluster plugin's own
// answers), the DHCP reservations and options dhcp.FromCluster, the load
// balancer's checks and timeouts lb's defaults, and the virtual routers
// cluster.Config.VIPInstances. Nothing here derives a VRID, a priority or a
// record a second time, so a site can mix rendered programs with the
// appliance node by node.
//
// Every function but WriteDir is pure: config in, file contents out.
package render
