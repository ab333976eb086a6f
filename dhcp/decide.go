package dhcp

import (
	"encoding/binary"
	"hash/fnv"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/insomniacslk/dhcp/rfc1035label"
)

// DropReason says why a request got no reply; it is a metrics label.
type DropReason string

// Drop reasons.
const (
	DropMalformed     DropReason = "malformed"       // not a decodable DHCP message
	DropNotRequest    DropReason = "not-request"     // op is not BOOTREQUEST
	DropBadHWAddr     DropReason = "bad-hwaddr"      // not a 6-byte Ethernet chaddr
	DropNoMessageType DropReason = "no-message-type" // BOOTP, or option 53 missing
	DropUnknownType   DropReason = "unknown-type"    // a type a server does not receive
	DropForeignRelay  DropReason = "foreign-relay"   // giaddr outside the served network
	DropOtherServer   DropReason = "other-server"    // option 54 names another server
	DropUnknownClient DropReason = "unknown-client"  // no reservation and no pool to serve it
	DropPoolExhausted DropReason = "pool-exhausted"  // no free pool address
	DropBadRequest    DropReason = "bad-request"     // REQUEST/INFORM/DECLINE fields inconsistent
	DropOverload      DropReason = "overload"        // worker queue full (set by Server)
	DropProbeConflict DropReason = "probe-conflict"  // ARP probe found the address in use (set by Server)
	DropStore         DropReason = "store"           // lease could not be made durable (set by Server)
)

// ChangeKind is what a decision does to the lease store.
type ChangeKind int

// Change kinds.
const (
	// ChangeNone leaves the store alone.
	ChangeNone ChangeKind = iota
	// ChangeOffer remembers an offered pool address in memory, so two
	// concurrent DISCOVERs do not get the same one. Never persisted: an offer
	// lost in a crash is re-offered from the same hash.
	ChangeOffer
	// ChangeBind creates or extends a pool lease; the reply must not leave
	// before the store made it durable.
	ChangeBind
	// ChangeRelease ends the client's lease on IP.
	ChangeRelease
	// ChangeDecline marks IP as in use by someone unknown.
	ChangeDecline
)

// Change is a lease-store update a decision asks for.
type Change struct {
	Kind     ChangeKind
	IP       netip.Addr
	MAC      net.HardwareAddr
	Hostname string
	Expiry   time.Time
}

// Decision is the outcome of one request. Exactly one of Reply and Drop is
// set, except for RELEASE and DECLINE, which are answered by silence with
// Drop empty.
type Decision struct {
	Reply  *dhcpv4.DHCPv4
	Drop   DropReason
	Change Change
	// FromPool marks a reply whose address comes from the pool (the server
	// ARP-probes those).
	FromPool bool
}

// Lease is one address held by a client (or, when Declined, by an unknown
// host that answered a probe or made a client DECLINE it).
type Lease struct {
	IP       netip.Addr       `json:"ip"`
	MAC      net.HardwareAddr `json:"-"`
	MACText  string           `json:"mac,omitempty"`
	Hostname string           `json:"hostname,omitempty"`
	Expiry   time.Time        `json:"expiry"`
	Declined bool             `json:"declined,omitempty"`
	// Offered marks an in-memory offer not yet requested.
	Offered bool `json:"-"`
}

// LeaseView is what Decide reads of the lease store.
type LeaseView interface {
	ByMAC(mac net.HardwareAddr) (Lease, bool)
	ByIP(ip netip.Addr) (Lease, bool)
}

// Input is one call of Decide.
type Input struct {
	Request   *dhcpv4.DHCPv4
	Leases    LeaseView
	ServePool bool // this server may hand out pool addresses now
	Now       time.Time
}

// offerHold is how long an offered pool address stays set aside for its
// client (RFC 2131 leaves it to the server; clients request within seconds).
const offerHold = 30 * time.Second

// declineHold is how long a declined or probed-busy address stays out of the
// pool.
const declineHold = 10 * time.Minute

// Policy is the immutable part of the reply logic, built once from Options.
type Policy struct {
	opts       Options
	leaseTime  time.Duration
	byMAC      map[string]Reservation
	reservedIP map[netip.Addr]bool
	excluded   map[netip.Addr]bool
	mask       net.IPMask
	poolSize   uint32
	poolStart  uint32
	common     map[uint8][]byte // options sent in every OFFER/ACK, encoded once
}

// NewPolicy validates opts and precomputes what Decide needs.
func NewPolicy(opts Options) (*Policy, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p := &Policy{
		opts:       opts,
		leaseTime:  opts.LeaseTime,
		byMAC:      make(map[string]Reservation, len(opts.Reservations)),
		reservedIP: make(map[netip.Addr]bool, len(opts.Reservations)),
		excluded:   map[netip.Addr]bool{opts.ServerID: true},
		mask:       net.CIDRMask(opts.Network.Bits(), 32),
	}
	if p.leaseTime == 0 {
		p.leaseTime = DefaultLeaseTime
	}
	for _, r := range opts.Reservations {
		p.byMAC[r.MAC.String()] = r
		p.reservedIP[r.IP] = true
	}
	for _, a := range opts.Excluded {
		p.excluded[a] = true
	}
	if !opts.Pool.IsZero() {
		p.poolStart = u32(opts.Pool.Start)
		p.poolSize = u32(opts.Pool.End) - p.poolStart + 1
	}
	common := []dhcpv4.Option{dhcpv4.OptSubnetMask(p.mask)}
	if opts.Router.IsValid() {
		common = append(common, dhcpv4.OptRouter(ip4(opts.Router)))
	}
	dns := opts.DNS
	if len(dns) == 0 {
		dns = []netip.Addr{opts.ServerID}
	}
	common = append(common, dhcpv4.OptDNS(ips(dns)...))
	if opts.Domain != "" {
		common = append(common, dhcpv4.OptDomainName(opts.Domain))
	}
	if len(opts.NTP) > 0 {
		common = append(common, dhcpv4.OptNTPServers(ips(opts.NTP)...))
	}
	if len(opts.SearchDomains) > 0 {
		common = append(common, dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: opts.SearchDomains}))
	}
	p.common = make(map[uint8][]byte, len(common))
	for _, o := range common {
		p.common[o.Code.Code()] = o.Value.ToBytes()
	}
	return p, nil
}

// Options returns the options the policy was built from.
func (p *Policy) Options() Options { return p.opts }

// Decide answers one request per RFC 2131 as an authoritative server for
// Options.Network. It is pure: the lease view and the time come in, the
// reply and the store change go out.
func (p *Policy) Decide(in Input) Decision {
	req := in.Request
	if req == nil {
		return Decision{Drop: DropMalformed}
	}
	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return Decision{Drop: DropNotRequest}
	}
	if req.HWType != iana.HWTypeEthernet || len(req.ClientHWAddr) != 6 {
		return Decision{Drop: DropBadHWAddr}
	}
	if gi := addr(req.GatewayIPAddr); gi.IsValid() && !gi.IsUnspecified() && !p.opts.Network.Contains(gi) {
		return Decision{Drop: DropForeignRelay}
	}
	if sid := addr(req.ServerIdentifier()); sid.IsValid() && sid != p.opts.ServerID {
		// The client chose (or talks to) another server; forget our offer.
		return Decision{Drop: DropOtherServer, Change: p.forgetOffer(in)}
	}
	switch req.MessageType() {
	case dhcpv4.MessageTypeNone:
		return Decision{Drop: DropNoMessageType}
	case dhcpv4.MessageTypeDiscover:
		return p.discover(in)
	case dhcpv4.MessageTypeRequest:
		return p.request(in)
	case dhcpv4.MessageTypeInform:
		return p.inform(in)
	case dhcpv4.MessageTypeRelease:
		return p.release(in)
	case dhcpv4.MessageTypeDecline:
		return p.decline(in)
	}
	return Decision{Drop: DropUnknownType}
}

func (p *Policy) forgetOffer(in Input) Change {
	if l, ok := in.Leases.ByMAC(in.Request.ClientHWAddr); ok && l.Offered {
		return Change{Kind: ChangeRelease, IP: l.IP, MAC: in.Request.ClientHWAddr}
	}
	return Change{}
}

func (p *Policy) discover(in Input) Decision {
	mac := in.Request.ClientHWAddr
	if r, ok := p.byMAC[mac.String()]; ok {
		return Decision{Reply: p.reply(in.Request, dhcpv4.MessageTypeOffer, r.IP, r.Hostname)}
	}
	if !in.ServePool || p.poolSize == 0 {
		return Decision{Drop: DropUnknownClient}
	}
	ip, ok := p.pick(in)
	if !ok {
		return Decision{Drop: DropPoolExhausted}
	}
	return Decision{
		Reply:    p.reply(in.Request, dhcpv4.MessageTypeOffer, ip, ""),
		Change:   Change{Kind: ChangeOffer, IP: ip, MAC: mac, Expiry: in.Now.Add(offerHold)},
		FromPool: true,
	}
}

// pick chooses a pool address for a client: its current lease or offer, else
// the address it asks for, else the first free one probing forward from a
// hash of its MAC, so the same MAC gets the same address across restarts and
// servers while the pool is not crowded.
func (p *Policy) pick(in Input) (netip.Addr, bool) {
	mac := in.Request.ClientHWAddr
	if l, ok := in.Leases.ByMAC(mac); ok && !l.Declined && p.inPool(l.IP) && p.freeFor(in, l.IP) {
		return l.IP, true
	}
	if want := addr(in.Request.RequestedIPAddress()); p.inPool(want) && p.freeFor(in, want) {
		return want, true
	}
	h := fnv.New32a()
	h.Write(mac)
	start := h.Sum32() % p.poolSize
	for i := uint32(0); i < p.poolSize; i++ {
		ip := fromU32(p.poolStart + (start+i)%p.poolSize)
		if p.inPool(ip) && p.freeFor(in, ip) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// PoolSize is how many addresses the pool may ever hand out: its range less
// the excluded and reserved addresses and the network's own network and
// broadcast addresses.
func (p *Policy) PoolSize() int {
	if p.poolSize == 0 {
		return 0
	}
	n := int(p.poolSize)
	seen := map[netip.Addr]bool{}
	out := func(ip netip.Addr) {
		if seen[ip] || !ip.Is4() {
			return
		}
		if v := u32(ip); v >= p.poolStart && v-p.poolStart < p.poolSize {
			seen[ip] = true
			n--
		}
	}
	for ip := range p.excluded {
		out(ip)
	}
	for ip := range p.reservedIP {
		out(ip)
	}
	net := p.opts.Network
	out(net.Addr())
	out(fromU32(u32(net.Addr()) | ^binary.BigEndian.Uint32(p.mask)))
	return n
}

// PoolFree is how many of the pool's addresses no live entry holds at now:
// held lists the store's addresses (leases, offers, declined) with their
// expiry.
func (p *Policy) PoolFree(held []Lease, now time.Time) int {
	n := p.PoolSize()
	for _, l := range held {
		if l.Expiry.After(now) && p.inPool(l.IP) {
			n--
		}
	}
	return max(n, 0)
}

// inPool says whether ip may ever be handed out from the pool.
func (p *Policy) inPool(ip netip.Addr) bool {
	if p.poolSize == 0 || !ip.Is4() {
		return false
	}
	v := u32(ip)
	if v < p.poolStart || v-p.poolStart >= p.poolSize {
		return false
	}
	if p.excluded[ip] || p.reservedIP[ip] {
		return false
	}
	// Never the network or broadcast address of the served network.
	n := p.opts.Network
	if ip == n.Addr() || v == u32(n.Addr())|^binary.BigEndian.Uint32(p.mask) {
		return false
	}
	return true
}

// freeFor says whether ip is free or already this client's.
func (p *Policy) freeFor(in Input, ip netip.Addr) bool {
	l, ok := in.Leases.ByIP(ip)
	if !ok || !l.Expiry.After(in.Now) {
		return true
	}
	return !l.Declined && macEqual(l.MAC, in.Request.ClientHWAddr)
}

func (p *Policy) request(in Input) Decision {
	req := in.Request
	ci := addr(req.ClientIPAddr)
	want := addr(req.RequestedIPAddress())
	selecting := req.Options.Has(dhcpv4.OptionServerIdentifier)
	switch {
	case selecting || want.IsValid() && !want.IsUnspecified():
		// SELECTING (option 54 is ours, checked above) or INIT-REBOOT:
		// the address is in option 50 and ciaddr must be zero.
		if !want.IsValid() || want.IsUnspecified() || (ci.IsValid() && !ci.IsUnspecified()) {
			return Decision{Drop: DropBadRequest}
		}
	case ci.IsValid() && !ci.IsUnspecified():
		// RENEWING (unicast) or REBINDING (broadcast): the address is ciaddr.
		want = ci
	default:
		return Decision{Drop: DropBadRequest}
	}
	mac := req.ClientHWAddr
	if r, ok := p.byMAC[mac.String()]; ok {
		if want != r.IP {
			return Decision{Reply: p.nak(req, "address is reserved for another host; this host's is "+r.IP.String())}
		}
		return Decision{Reply: p.reply(req, dhcpv4.MessageTypeAck, r.IP, r.Hostname)}
	}
	if !p.opts.Network.Contains(want) {
		return Decision{Reply: p.nak(req, "wrong network")}
	}
	if p.reservedIP[want] {
		return Decision{Reply: p.nak(req, "address is reserved for another host")}
	}
	if !in.ServePool || p.poolSize == 0 {
		// Another server may serve the pool; stay silent so it can answer.
		return Decision{Drop: DropUnknownClient}
	}
	if !p.inPool(want) || !p.freeFor(in, want) {
		return Decision{Reply: p.nak(req, "address not available")}
	}
	return Decision{
		Reply:    p.reply(req, dhcpv4.MessageTypeAck, want, ""),
		Change:   Change{Kind: ChangeBind, IP: want, MAC: mac, Hostname: req.HostName(), Expiry: in.Now.Add(p.leaseTime)},
		FromPool: true,
	}
}

func (p *Policy) inform(in Input) Decision {
	ci := addr(in.Request.ClientIPAddr)
	if !ci.IsValid() || !p.opts.Network.Contains(ci) {
		return Decision{Drop: DropBadRequest}
	}
	r := p.reply(in.Request, dhcpv4.MessageTypeAck, netip.Addr{}, "")
	// RFC 2131 4.3.5: no lease time and no yiaddr in an ACK to INFORM.
	r.Options.Del(dhcpv4.OptionIPAddressLeaseTime)
	r.Options.Del(dhcpv4.OptionRenewTimeValue)
	r.Options.Del(dhcpv4.OptionRebindingTimeValue)
	if hn := p.byMAC[in.Request.ClientHWAddr.String()].Hostname; hn != "" {
		r.UpdateOption(dhcpv4.OptHostName(hn))
	}
	return Decision{Reply: r}
}

func (p *Policy) release(in Input) Decision {
	ci := addr(in.Request.ClientIPAddr)
	l, ok := in.Leases.ByIP(ci)
	if !ok || !macEqual(l.MAC, in.Request.ClientHWAddr) {
		return Decision{} // nothing to release; silence is the answer
	}
	return Decision{Change: Change{Kind: ChangeRelease, IP: ci, MAC: in.Request.ClientHWAddr}}
}

func (p *Policy) decline(in Input) Decision {
	ip := addr(in.Request.RequestedIPAddress())
	if !ip.IsValid() || !p.opts.Network.Contains(ip) {
		return Decision{Drop: DropBadRequest}
	}
	return Decision{Change: Change{Kind: ChangeDecline, IP: ip, Expiry: in.Now.Add(declineHold)}}
}

// reply builds an OFFER or ACK with the common options.
func (p *Policy) reply(req *dhcpv4.DHCPv4, t dhcpv4.MessageType, yiaddr netip.Addr, hostname string) *dhcpv4.DHCPv4 {
	r := p.base(req, t)
	if yiaddr.IsValid() {
		r.YourIPAddr = ip4(yiaddr)
		r.UpdateOption(dhcpv4.OptIPAddressLeaseTime(p.leaseTime))
		r.UpdateOption(dhcpv4.OptRenewTimeValue(p.leaseTime / 2))
		r.UpdateOption(dhcpv4.OptRebindingTimeValue(p.leaseTime * 7 / 8))
	}
	for code, v := range p.common {
		r.Options[code] = v // shared, never modified: replies are only encoded
	}
	if hostname != "" {
		r.UpdateOption(dhcpv4.OptHostName(hostname))
	}
	return r
}

func (p *Policy) nak(req *dhcpv4.DHCPv4, msg string) *dhcpv4.DHCPv4 {
	r := p.base(req, dhcpv4.MessageTypeNak)
	r.UpdateOption(dhcpv4.OptMessage(msg))
	if gi := addr(req.GatewayIPAddr); gi.IsValid() && !gi.IsUnspecified() {
		// RFC 2131 4.3.2: a relay must broadcast the NAK to the client.
		r.SetBroadcast()
	}
	return r
}

// base is a reply skeleton: xid, chaddr, flags, giaddr and the client
// identifier copied (RFC 6842), message type and server identifier set.
func (p *Policy) base(req *dhcpv4.DHCPv4, t dhcpv4.MessageType) *dhcpv4.DHCPv4 {
	r := &dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeBootReply,
		HWType:        req.HWType,
		TransactionID: req.TransactionID,
		Flags:         req.Flags,
		ClientIPAddr:  net.IPv4zero.To4(),
		YourIPAddr:    net.IPv4zero.To4(),
		ServerIPAddr:  net.IPv4zero.To4(),
		GatewayIPAddr: net.IPv4zero.To4(),
		ClientHWAddr:  append(net.HardwareAddr(nil), req.ClientHWAddr...),
		Options:       dhcpv4.Options{},
	}
	if gi := addr(req.GatewayIPAddr); gi.IsValid() {
		r.GatewayIPAddr = ip4(gi)
	}
	if t == dhcpv4.MessageTypeAck {
		if ci := addr(req.ClientIPAddr); ci.IsValid() {
			r.ClientIPAddr = ip4(ci)
		}
	}
	r.UpdateOption(dhcpv4.OptMessageType(t))
	r.UpdateOption(dhcpv4.OptServerIdentifier(ip4(p.opts.ServerID)))
	if v := req.Options.Get(dhcpv4.OptionClientIdentifier); v != nil {
		r.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionClientIdentifier, v))
	}
	if v := req.Options.Get(dhcpv4.OptionRelayAgentInformation); v != nil {
		r.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionRelayAgentInformation, v))
	}
	return r
}

// addr converts a packet IP to netip; the zero Addr for nil or non-IPv4.
func addr(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	a = a.Unmap()
	if !a.Is4() {
		return netip.Addr{}
	}
	return a
}

func ip4(a netip.Addr) net.IP { b := a.As4(); return net.IP(b[:]) }

func ips(as []netip.Addr) []net.IP {
	out := make([]net.IP, len(as))
	for i, a := range as {
		out[i] = ip4(a)
	}
	return out
}

func u32(a netip.Addr) uint32 { b := a.As4(); return binary.BigEndian.Uint32(b[:]) }

func fromU32(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

func macEqual(a, b net.HardwareAddr) bool { return string(a) == string(b) }
