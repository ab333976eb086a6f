// Package lb owns the in-process layer-4 load balancer for the Kubernetes
// API (6443) and the Machine Config Server (22623): TCP proxies run as
// epoll event loops that splice bytes between two kernel sockets without
// copying them through user space,
// backend pools built from the live cluster membership (control-plane nodes,
// with the bootstrap node as a backup), HTTPS health checks with hysteresis
// and slow start, and the nftables redirect that sends VIP:6443 and
// VIP:22623 to the proxies while they have a healthy backend.
//
// It never terminates TLS: the bytes a client sends reach the backend
// untouched, so the MCS's certificate and the Ignition Accept header pass
// through as they are.
package lb
