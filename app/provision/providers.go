package provision

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"appliance/internal/cluster"
	"appliance/platform"
	"appliance/platform/kubevirt"
	"appliance/platform/libvirt"
	"appliance/platform/ovirt"
)

// openProvider connects to the platform appliance.yaml names. Credentials
// come from the platform's own files and environment, never from flags.
func openProvider(ctx context.Context, p *cluster.Provision, log *slog.Logger) (platform.Provider, error) {
	switch p.Platform {
	case cluster.PlatformLibvirt:
		return libvirt.New(ctx, libvirtOptions(p), log)
	case cluster.PlatformOVirt:
		opts, err := ovirtOptions(p, os.Getenv)
		if err != nil {
			return nil, err
		}
		return ovirt.New(ctx, opts, log)
	case cluster.PlatformKubeVirt:
		// client-go and controller-runtime log through process-wide
		// loggers: the run's log takes them over, so a JSON log stays JSON.
		kubevirt.RouteClientLogs(log)
		return kubevirt.New(ctx, kubevirtOptions(p), log)
	}
	return nil, fmt.Errorf("no platform %q", p.Platform)
}

// libvirtOptions are provision.libvirt's; the URI carries no credential.
func libvirtOptions(p *cluster.Provision) libvirt.Options {
	l := p.Libvirt
	return libvirt.Options{URI: l.URI, Socket: l.Socket, Pool: l.Pool, Network: l.Network, Bridge: l.Bridge,
		DomainType: l.DomainType, Machine: l.Machine, Firmware: l.Firmware}
}

// ovirtOptions are provision.ovirt's, with the engine's URL and credentials
// from provision.ovirt.credentialsFile, else ovirt-config.yaml where the
// oVirt tools keep it (when it exists), overridden field by field by the
// OVIRT_* variables of env.
func ovirtOptions(p *cluster.Provision, env func(string) string) (ovirt.Options, error) {
	o := p.OVirt
	path := o.CredentialsFile
	if path == "" {
		path = ovirt.DefaultCredentialsPath(env)
		if _, err := os.Stat(path); err != nil {
			path = "" // the environment alone may carry everything
		}
	}
	creds, err := ovirt.LoadCredentials(path, env)
	if err != nil {
		return ovirt.Options{}, err
	}
	if o.Insecure {
		creds.Insecure = true
	}
	return ovirt.Options{Credentials: creds, ClusterID: o.ClusterID, StorageDomainID: o.StorageDomainID,
		VNICProfileID: o.VNICProfileID, Affinity: ovirt.Affinity{Disabled: o.Affinity == "none", Soft: o.Affinity == "soft"}}, nil
}

// kubevirtOptions are provision.kubevirt's; the kubeconfig is the user's
// own (provision.kubevirt.kubeconfig, else $KUBECONFIG, else
// ~/.kube/config, as kubevirt.New reads it).
func kubevirtOptions(p *cluster.Provision) kubevirt.Options {
	k := p.KubeVirt
	return kubevirt.Options{Kubeconfig: k.Kubeconfig, Context: k.Context, Namespace: k.Namespace,
		Network: k.Network, StorageClass: k.StorageClass, Parallel: p.Parallel}
}
