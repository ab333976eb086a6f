package provision

import (
	"strings"
	"time"

	"appliance/internal/cluster"
	"appliance/platform"
)

// Event is one thing apply reports as it happens, in the order it happens;
// the command turns each into its line, live line or progress bar. The
// concrete types below are all there are.
type Event interface{ event() }

// IgnitionWarning is a finding of the merge of the appliance's files into
// an asset, worth a look but no reason to stop.
type IgnitionWarning struct{ Text string }

// ServingIgnition says the Role's config, too large to hand a VM, is served
// at URL (behind a CA generated for this run, which the VM's pointer config
// carries).
type ServingIgnition struct {
	Role cluster.Role
	URL  string
}

// PlatformWarning is a warning of the platform's checks.
type PlatformWarning struct{ Text string }

// ImageDownload counts the base image's bytes as they arrive: only while a
// download runs, so a cache hit reports none.
type ImageDownload struct{ Done, Total int64 }

// ImageDownloaded ends a fetch of the base image into the cache (Err nil on
// success); a local file, a container disk or an image the cluster imports
// itself is no fetch.
type ImageDownloaded struct{ Err error }

// BuildStart begins building: Machines names every VM, in spec order, for
// one live line each.
type BuildStart struct{ Machines []string }

// MachineStep is one step of a machine (or of the base image's upload)
// while building or waiting.
type MachineStep struct{ Step Step }

// BuildEnd ends building. Result says what was created, completed, found
// and started; nil when nothing could be counted.
type BuildEnd struct{ Result *platform.Result }

// ServerStops warns that the Roles' VMs were left off (--no-start) with a
// pointer to this run's Ignition server, which stops with apply: their
// pointers carry this run's CA.
type ServerStops struct{ Roles []cluster.Role }

// WaitStart begins waiting, at most Timeout, until every VM runs and
// reports its expected address; Machines names them, for one live line each.
type WaitStart struct {
	Timeout  time.Duration
	Machines []string
}

// WaitEnd ends the wait, whatever its outcome.
type WaitEnd struct{}

// AllRunning says all VMs run with their addresses.
type AllRunning struct{ VMs int }

// AwaitingFetch says apply keeps serving until the Roles' VMs, built by this
// run, have fetched their config.
type AwaitingFetch struct{ Roles []cluster.Role }

// AllFetched says every served config was fetched.
type AllFetched struct{}

func (IgnitionWarning) event() {}
func (ServingIgnition) event() {}
func (PlatformWarning) event() {}
func (ImageDownload) event()   {}
func (ImageDownloaded) event() {}
func (BuildStart) event()      {}
func (MachineStep) event()     {}
func (BuildEnd) event()        {}
func (ServerStops) event()     {}
func (WaitStart) event()       {}
func (WaitEnd) event()         {}
func (AllRunning) event()      {}
func (AwaitingFetch) event()   {}
func (AllFetched) event()      {}

// JoinRoles lists roles as "bootstrap, master", for messages.
func JoinRoles(rs []cluster.Role) string {
	ss := make([]string, len(rs))
	for i, r := range rs {
		ss[i] = string(r)
	}
	return strings.Join(ss, ", ")
}
