// Package kubenodes owns one member source: the Kubernetes API's Node
// objects. It watches Nodes with a client-go informer and keeps them in a
// cluster.State as SourceKubernetes members (name, role from the
// node-role.kubernetes.io/* labels, InternalIP addresses of both families,
// readiness as Healthy), so a node that joins on day 2 reaches every
// service that reads the State without a restart, and a deleted Node
// leaves it.
//
// It decides nothing about VIPs, pools or DNS: services read the members
// from the State. It never drops members because the API is unreachable:
// the last view stays until the API says a Node is gone.
//
// It also picks the kubeconfig to read (Kubeconfig) and, on nodes that run
// an apiserver, points the client at that local apiserver instead of the
// VIP the node itself serves (Options.LocalServer). A kubelet writes its
// kubeconfig only after its TLS bootstrap: the Watcher waits for the file
// (Status.WaitingFor) and starts listing when it appears. client-go reloads
// a client certificate given as a file (the kubelet's rotating
// kubelet-client-current.pem) on its own.
//
// Since Kubernetes 1.34 the Node authorizer lets a kubelet's credentials
// read only their own Node; listing all of them needs the RBAC grant named
// NodeReaderName, which `appliance manifests` writes to NodeReaderManifest.
// A refusal is logged once, naming both; the last view stays and the
// informer retries with its backoff.
package kubenodes
