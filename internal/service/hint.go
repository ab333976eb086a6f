package service

import (
	"errors"
	"fmt"
	"syscall"
)

// Hint adds what to do to an error whose cause is the node rather than the
// config: a port another program holds, or a capability the process lacks.
// The error itself already names the service and the address.
func Hint(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%w (another program holds that port: stop it, or move ours with the flag or setting named above)", err)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w (not permitted: the appliance needs CAP_NET_ADMIN for addresses and nftables, "+
			"CAP_NET_RAW for the VRRP, ARP and DHCP sockets and CAP_NET_BIND_SERVICE for ports below 1024; "+
			"run it as root, or add NET_ADMIN, NET_RAW and NET_BIND_SERVICE to the static pod's securityContext.capabilities)", err)
	}
	return err
}
