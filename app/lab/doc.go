// Package lab is the demo behind `make run` (`appliance lab`): a whole
// cluster in network namespaces (a bootstrap node, three masters and two
// workers, each running `appliance run`, next to stand-ins for the
// apiserver, the Machine Config Server and the ingress router) and a
// client calling the API through its VIP the whole time, while the
// bootstrap hands over to the masters and is torn down, a master dies and a
// worker joins on day 2.
//
// It prints what happens, with timings, and returns the measured facts
// (Result) so a test can hold the lab to them. The stand-in servers the
// lab starts in each node are served by the binary itself (hidden
// `appliance lab apiserver|mcs|router` commands built on ServeAPIServer,
// ServeMCS and ServeRouter). netlab owns the namespaces and processes:
// Ctrl-C or an error removes everything.
package lab
