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
//
// One job per file:
//
//   - lb.go: the LB's lifecycle: New, Run (start, shutdown order, drain),
//     readiness (Ready, Serving, ServingVIP), Status, Kick.
//   - options.go: Options, their defaults, and FromCluster (the config's lb
//     section).
//   - pool.go: a balanced service: its backends from the membership, the
//     pick (round-robin, least connections), the sessions of each backend.
//   - health.go: the health checks: hysteresis, slow start, the HTTPS prober.
//   - family.go: address families: which backend takes which client when
//     dual-stack.
//   - proxy.go: one pool's proxy: its listener and its event loops.
//   - loop.go, session.go, rawsock.go: the data path: the epoll loop and
//     accept, a session's connect and splice, the raw system calls.
//   - redirect.go: the nftables redirect table (Redirector).
//   - redirect_reconcile.go: the redirect kept in step with the pools' health.
//   - redirect_watch.go, redirect_repair.go: the table watched and put back
//     when someone else changes it.
//   - handback.go: the handback rules and their nftables tables.
//   - handback_follow.go: the handback kept in step with the VRRP state.
//   - metrics.go: the Prometheus metrics.
package lb
