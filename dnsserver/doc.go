// Package dnsserver owns the cluster's DNS service: an embedded CoreDNS with
// an explicit, short list of directives (never the full plugin set), the
// "cluster" plugin that answers api, api-int, *.apps, node names and their
// PTR records from the live cluster.State, upstream forwarding to the node's
// resolvers (resolv.conf minus the node's own addresses), and mDNS publishing
// and browsing that feeds discovered members into State.
//
// The Corefile is generated in-process (see Corefile) and never written to
// disk. A change of upstreams swaps the forwarder behind the running server
// instead of restarting it, so no query (UDP or TCP) is lost.
//
// Over UDP a fast path answers the cluster's names before CoreDNS's server
// and plugin chain, from replies the chain's own code packed once per
// cluster-view version; everything else still goes through the chain.
package dnsserver
