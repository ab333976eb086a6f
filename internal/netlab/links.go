package netlab

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Bridge port states (include/uapi/linux/if_bridge.h). Partition uses
// "disabled": without STP the kernel immediately re-selects a "blocking"
// port as forwarding, but leaves a disabled port alone.
const (
	brStateDisabled   = 0
	brStateForwarding = 3
)

// createBridge creates an up bridge in the calling thread's namespace with
// STP off, forward delay 0 and multicast snooping off. Snooping off makes the
// bridge flood every multicast frame, so VRRP (224.0.0.18, ff02::12) and mDNS
// reach all nodes whether or not anyone sent IGMP/MLD reports. The netlink
// library's Bridge type cannot express forward delay or STP state, hence the
// hand-built request.
func createBridge(name string) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Flags = unix.IFF_UP
	msg.Change = unix.IFF_UP
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	data.AddRtAttr(nl.IFLA_BR_FORWARD_DELAY, nl.Uint32Attr(0))
	data.AddRtAttr(nl.IFLA_BR_STP_STATE, nl.Uint32Attr(0))
	data.AddRtAttr(nl.IFLA_BR_MCAST_SNOOPING, []byte{0})
	req.AddData(info)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("netlab: create bridge %s: %w", name, err)
	}
	return nil
}

// setBridgePortState sets a bridge port's STP state by hand (allowed while
// the bridge runs no STP). A disabled port forwards nothing in either
// direction while both veth ends keep their carrier.
func setBridgePortState(port string, state uint8) error {
	link, err := netlink.LinkByName(port)
	if err != nil {
		return fmt.Errorf("netlab: bridge port %s: %w", port, err)
	}
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_BRIDGE)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	pi := nl.NewRtAttr(unix.IFLA_PROTINFO|unix.NLA_F_NESTED, nil)
	pi.AddRtAttr(nl.IFLA_BRPORT_STATE, []byte{state})
	req.AddData(pi)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("netlab: bridge port %s: set state %d: %w", port, state, err)
	}
	return nil
}

// setLinkUp brings a link of the calling thread's namespace up.
func setLinkUp(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netlab: link %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("netlab: link %s up: %w", name, err)
	}
	return nil
}
