// Package ovirt implements platform.Provider on oVirt/RHV through the
// engine's REST API (go-ovirt-client).
//
// It owns the oVirt side of `appliance provision`: reading the engine
// credentials from the ovirt-config.yaml file or the OVIRT_* environment,
// uploading the RHCOS image and turning it into the template
// "<infraID>-rhcos" (OS type rhcos_x64), cloning one VM per machine from it
// (CPU, memory, disk size, Ignition in the initialization custom script, one
// NIC with the machine's MAC), the control-plane and compute anti-affinity
// groups, and destroy.
//
// Ownership marks: every VM, template, affinity group and the tag carry
// "appliance-provision infraID=<id>" in their description, written in the
// same call that creates them, so a run killed between two calls still
// recognises its own objects and never adopts a foreign one. VMs are also
// tagged "<infraID>" (installer convention; destroy honours either mark).
// Disks cannot carry a description: the uploaded image disk is found by its
// exact alias "<infraID>-rhcos-image"; VM and template disks go with
// their owner.
package ovirt
