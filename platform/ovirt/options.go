package ovirt

import (
	"time"
)

// Options configures the provider: where to connect and where to place VMs.
type Options struct {
	// Credentials reach the engine (see LoadCredentials); unused by
	// NewWithClient.
	Credentials Credentials
	// ClusterID, StorageDomainID and VNICProfileID are the oVirt IDs (UUIDs)
	// of the cluster VMs run in, the storage domain for the template and VM
	// disks, and the vNIC profile of the machine network.
	ClusterID       string
	StorageDomainID string
	VNICProfileID   string
	// Affinity controls the anti-affinity groups.
	Affinity Affinity
	// PollInterval is how often long engine operations (disk locks, template
	// creation, power changes) are polled; default 2s.
	PollInterval time.Duration
	// WaitTimeout bounds each such wait; default 30m (a template copy of a
	// large image on slow storage takes long).
	WaitTimeout time.Duration
	// Workers bounds the parallel calls of List and Destroy; default 8.
	Workers int
}

// Affinity selects the negative VM affinity groups "<infraID>-controlplane"
// (masters) and "<infraID>-compute" (workers); the bootstrap VM is in none.
type Affinity struct {
	// Disabled creates no groups.
	Disabled bool
	// Soft makes the groups non-enforcing: the scheduler spreads the VMs when
	// it can but still starts them on a cluster with fewer hosts than
	// masters. By default the groups are enforcing.
	Soft bool
}

func (o *Options) defaults() {
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 30 * time.Minute
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
}
