// Package service is the contract every long-running part of the appliance
// keeps (VRRP, the load balancer, DNS, DHCP, the node's live view) and the one
// runner that starts them: the admin listener first, then every service under
// one supervision, and on stop the services in stages (VRRP hands its VIPs
// over first, then the LB drains, then DNS). A service that stops on its own
// stops the process loudly: nothing keeps running half-alive. Once the services
// are ready, Run releases the mappings of the binary's start-up pages
// (exepages), and again every hour.
package service
