// Package e2e holds the whole-system tests and the benchmarks: the shipped
// appliance binary (built once per test binary with internal/apptest) run
// as processes in network namespaces among its peers: other appliances,
// keepalived, Ignition, a real kube-apiserver and stand-ins for what
// OpenShift runs there. The deployed tests bring nodes up exactly as the
// cluster deploys them (the static pod's own command line and the node's
// files taken out of what `appliance manifests` writes); the others start
// one subcommand (vip, dns, lb, run, ...) as the behaviour under test
// needs. The benchmarks (TestBench..., -tags bench) set the appliance
// against the stack it replaces; BENCHMARKS.md records their figures.
// Tests of the commands themselves (flags, output, exit status) stay in
// cmd/appliance. It has no code outside its tests.
package e2e
