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
package platform
