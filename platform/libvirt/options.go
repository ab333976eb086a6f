package libvirt

import (
	"errors"
	"fmt"
	"time"
)

// Options says where and how to create the VMs.
type Options struct {
	// URI is the libvirt connection URI: qemu:///system (default),
	// test:///default, qemu+tcp://host/system, qemu+tls://host/system (TLS
	// verified unless the URI says no_verify=1), qemu+ssh://user@host/system.
	// Put no password in it: it would be a credential in a config file.
	URI string
	// Socket overrides the local unix socket path (qemu:///system's default
	// is /var/run/libvirt/libvirt-sock); only for local URIs.
	Socket string
	// Pool is the storage pool for the base image, disks and Ignition
	// (default "default"). Its volumes' paths must be target/name, as in
	// dir, fs, netfs and logical pools.
	Pool string
	// Network is a libvirt network name, Bridge a host bridge; set at most
	// one (neither means Network "default").
	Network, Bridge string
	// DomainType is "kvm" (default) or "qemu" for TCG emulation.
	DomainType string
	// Machine is the machine type (e.g. "q35"); empty for libvirt's default.
	Machine string
	// Firmware is "" for BIOS or "efi".
	Firmware string
	// AgentTimeout bounds a guest agent address query in List (default 2s).
	AgentTimeout time.Duration
}

// withDefaults fills the defaults and checks the combinations.
func (o Options) withDefaults() (Options, error) {
	if o.URI == "" {
		o.URI = "qemu:///system"
	}
	if o.Pool == "" {
		o.Pool = "default"
	}
	if o.Network != "" && o.Bridge != "" {
		return o, errors.New("libvirt: options: set network or bridge, not both")
	}
	if o.Network == "" && o.Bridge == "" {
		o.Network = "default"
	}
	if o.DomainType == "" {
		o.DomainType = "kvm"
	}
	if o.DomainType != "kvm" && o.DomainType != "qemu" {
		return o, fmt.Errorf("libvirt: options: domainType %q: want kvm or qemu", o.DomainType)
	}
	if o.Firmware != "" && o.Firmware != "efi" && o.Firmware != "bios" {
		return o, fmt.Errorf("libvirt: options: firmware %q: want efi or bios", o.Firmware)
	}
	if o.Firmware == "bios" {
		o.Firmware = ""
	}
	if o.AgentTimeout <= 0 {
		o.AgentTimeout = 2 * time.Second
	}
	return o, nil
}
