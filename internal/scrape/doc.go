// Package scrape owns the secure scrape endpoint: the node's metrics on
// /metrics over TLS, on the node's own machine-network addresses, for
// callers the Kubernetes API authorises, so that cluster monitoring can read
// every node while the admin listener stays on loopback.
//
// Who may read: the caller's bearer token goes to the API in a TokenReview
// (who is it?) and the answer in a SubjectAccessReview (may that user get
// the non-resource URL /metrics?), with the kubelet's own credentials, the
// kubeconfig internal/kubenodes picks. Decisions are cached briefly (an
// allowed token for a minute, a refused one for ten seconds); a review the
// API does not answer is never cached and never passes. No token: 401; an
// unknown token: 401; a known user without the grant: 403; the API out of
// reach: 503. Nothing is ever served without a decision, and nothing is
// ever served over plain HTTP.
//
// What it proves itself with: a PEM file holding the certificate chain and
// its key, by default the kubelet's serving certificate
// (/var/lib/kubelet/pki/kubelet-server-current.pem, a symlink the kubelet
// repoints at each rotation), signed by the kubelet-serving CA that
// cluster monitoring already trusts for the kubelet, and naming the node's
// address as the kubelet's node IP. The file is looked at again (at most
// once a second, on a handshake, and every few seconds besides) and a new
// one is served from the next handshake on, without a restart. Until a
// certificate loads the endpoint does not listen at all; a later file that
// does not load leaves the last good certificate in service, and says so.
//
// Where: one listener per machine-network address of the node (never a VIP,
// never loopback nor the pods' networks), moved when the node's addresses
// move (SetAddrs). Server.Problem says why it cannot serve an authorised
// caller right now; the node lists that in /readyz without counting it.
package scrape
