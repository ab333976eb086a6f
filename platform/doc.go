// Package platform creates, inspects and removes a cluster's virtual machines.
//
// It owns the platform-neutral part of `appliance provision`: the Spec (what
// the cluster needs, built from appliance.yaml and the installer's assets), the
// plan (what exists and what is missing), and the parallel, resumable apply,
// status and destroy that drive a Provider. Each platform (libvirt, oVirt,
// KubeVirt) is a sub-package implementing Provider; none of them decides what
// to create, only how.
//
// Every resource a provider creates carries the cluster's infra ID as a tag or
// label, and destroy finds resources by that mark, never by name alone.
//
// The providers share one file shape, so a verb is found in the same file in
// each: provider.go (the type, New, Close), options.go, meta.go (the mark),
// list.go, image.go (PrepareImage), create.go, start.go and destroy.go
// (Destroy, DestroyVMs), their tests split the same way, a scenario_test.go
// for the whole cycle, and a README.md saying what the platform needs, where
// its credentials come from, what it creates and marks, and how it is tested.
// What only one platform has keeps a file named for what it does.
package platform
