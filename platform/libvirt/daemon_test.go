package libvirt

import "appliance/platform/libvirt/libvirttest"

// The private daemon lives in libvirttest so cmd/appliance's end-to-end
// test can start one too.
type testDaemon = libvirttest.Daemon

var (
	startDaemon = libvirttest.Start
	uniq        = libvirttest.Uniq
	qemuImg     = libvirttest.QemuImg
	pidsInNetns = libvirttest.PIDsInNetns
)
