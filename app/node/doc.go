// Package node is `appliance run`'s composition: which services a node's
// role starts (the plan), the functions that tie them together (the API VIP
// follows the LB, the bootstrap's API VIP follows its own apiserver, the
// ingress VIP follows the router, the DHCP pool follows the API VIP, the
// VRRP instances follow the node's address), and the order they stop in. It
// implements no protocol: every service is built from its own package.
package node
