package dnsserver

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"appliance/internal/cluster"
)

// The fast path answers the cluster's own names over UDP before the plugin
// chain: the replies are built once per cluster-view version by the cluster
// plugin's own lookup and CoreDNS's reply shaping (request.SizeAndDo and
// Scrub, as the server's ScrubWriter applies them), packed, and served by
// copying the query's ID, RD and CD bits, EDNS buffer size and the name as
// the client spelled it (0x20) into the packed bytes. Anything it cannot
// answer byte for byte as the chain would goes to the chain.

// fastTypes are the query types answered by the fast path; others (ANY,
// rare or unknown types) go to the chain.
var fastTypes = []uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypePTR, dns.TypeSOA, dns.TypeNS, dns.TypeMX,
	dns.TypeTXT, dns.TypeSRV, dns.TypeCNAME, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeCAA,
}

// fastMaxQuery is the largest query the fast path takes: the chain's UDP
// server reads 512 bytes (miekg/dns's default), so a longer query is left to
// it to be cut and refused the same way.
const fastMaxQuery = dns.MinMsgSize

// fastTable holds the packed replies for one cluster-view version.
type fastTable struct {
	version uint64
	// exact is keyed by the lower-case wire name followed by the type.
	exact map[string]*fastEntry
	// apps answers every name below apps.ZONE, nx every other name of the
	// zone that exact does not hold (NXDOMAIN), both by type.
	apps, nx map[uint16]*fastEntry
	// known are the names exact holds, by lower-case wire name: such a
	// name missing a type there is the chain's, never NXDOMAIN.
	known    map[string]bool
	zone     []byte // lower-case wire form of the zone
	appsZone []byte // of apps.ZONE
	off      bool   // answer nothing (the zone is under .local and mDNS answers it)
}

// fastEntry is one question's reply, without and with an OPT record.
type fastEntry struct {
	plain, edns fastReply
	request     prometheus.Counter // appliance_dns_requests_total{proto="udp",type}
	response    prometheus.Counter // appliance_dns_responses_total{rcode}
	result      prometheus.Counter // appliance_dns_cluster_queries_total{result}
}

// fastReply is a packed reply whose name echoes (the question and owner
// names that repeat the question's spelling) are cut out: the query's name
// goes between every two pieces.
type fastReply struct {
	pieces [][]byte
	ok     bool // false: not served by the fast path (too large, compressed)
}

// newFastTable packs the replies for snap. m may be nil (no counting).
func newFastTable(z *zoneData, snap *cluster.Snapshot, mdns bool, m *metrics) *fastTable {
	t := &fastTable{
		version: snap.Version,
		exact:   map[string]*fastEntry{},
		apps:    map[uint16]*fastEntry{},
		nx:      map[uint16]*fastEntry{},
		known:   map[string]bool{},
		zone:    wireName(z.zone),
	}
	t.appsZone = wireName("apps." + z.zone)
	if mdns && (z.zone == "local." || strings.HasSuffix(z.zone, ".local.")) {
		t.off = true
		return t
	}
	names := []string{z.zone, "apps." + z.zone, "api." + z.zone, "api-int." + z.zone}
	for _, mb := range snap.Members {
		l := strings.ToLower(mb.Name)
		names = append(names, l+"."+z.zone, l+".")
		for _, a := range mb.IPs {
			if rev, err := dns.ReverseAddr(a.Unmap().String()); err == nil {
				names = append(names, rev)
			}
		}
	}
	for _, a := range append(append([]netip.Addr(nil), z.apiVIPs...), z.ingressVIPs...) {
		if rev, err := dns.ReverseAddr(a.Unmap().String()); err == nil {
			names = append(names, rev)
		}
	}
	for _, n := range names {
		t.known[string(wireName(n))] = true
		for _, qt := range fastTypes {
			if e := z.fastEntry(n, qt, snap, m); e != nil {
				t.exact[string(wireName(n))+string([]byte{byte(qt >> 8), byte(qt)})] = e
			}
		}
	}
	for _, qt := range fastTypes {
		// Placeholders that stand for every name of their kind: lookup
		// answers all names below apps alike, and every other name below
		// the zone that is not known with NXDOMAIN.
		if e := z.fastEntry("fastpath.apps."+z.zone, qt, snap, m); e != nil {
			t.apps[qt] = e
		}
		if e := z.fastEntry("fastpath.nx."+z.zone, qt, snap, m); e != nil {
			t.nx[qt] = e
		}
	}
	return t
}

// fastEntry packs the chain's reply to name/qtype, nil when the chain would
// pass the question on.
func (z *zoneData) fastEntry(name string, qtype uint16, snap *cluster.Snapshot, m *metrics) *fastEntry {
	res := z.lookup(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET}, snap)
	if res.result == resultFallthrough {
		return nil
	}
	e := &fastEntry{plain: z.fastReply(name, qtype, false, snap), edns: z.fastReply(name, qtype, true, snap)}
	if !e.plain.ok && !e.edns.ok {
		return nil
	}
	if m != nil {
		e.request = m.request(false, qtype)
		e.response = m.response(res.rcode())
		e.result = m.answerBy[res.result]
	}
	return e
}

// fastReply packs the reply to name/qtype twice, the name spelled in lower
// and in upper case, and cuts it where the two differ by exactly the name:
// those are the echoes of the question's spelling.
func (z *zoneData) fastReply(name string, qtype uint16, edns bool, snap *cluster.Snapshot) fastReply {
	lower, ok1 := z.packReply(name, qtype, edns, snap)
	upper, ok2 := z.packReply(strings.ToUpper(name), qtype, edns, snap)
	if !ok1 || !ok2 || len(lower) != len(upper) {
		return fastReply{}
	}
	lw, uw := wireNameSpelled(name), wireNameSpelled(strings.ToUpper(name))
	var r fastReply
	start := 0
	for i := 0; i < len(lower); {
		if bytes.HasPrefix(lower[i:], lw) && bytes.HasPrefix(upper[i:], uw) {
			r.pieces = append(r.pieces, lower[start:i])
			i += len(lw)
			start = i
			continue
		}
		if lower[i] != upper[i] {
			return fastReply{} // a difference that is not an echo
		}
		i++
	}
	r.pieces = append(r.pieces, lower[start:])
	// The question is the first echo, right after the header.
	if len(r.pieces) < 2 || len(r.pieces[0]) != 12 {
		return fastReply{}
	}
	r.ok = true
	return r
}

// packReply is the chain's reply to a canonical query (ID 0, no flags, an
// OPT record of 1232 bytes when edns), shaped as the server's ScrubWriter
// shapes it; false when the fast path cannot serve it (compressed or cut).
func (z *zoneData) packReply(name string, qtype uint16, edns bool, snap *cluster.Snapshot) ([]byte, bool) {
	req := new(dns.Msg)
	req.SetQuestion(name, qtype)
	req.RecursionDesired = false
	req.Id = 0
	size := dns.MinMsgSize
	if edns {
		req.SetEdns0(ednsBufSize, false)
		size = ednsBufSize
	}
	m := reply(req, z.lookup(req.Question[0], snap))
	st := request.Request{Req: req, W: templateWriter{}}
	st.SizeAndDo(m)
	st.Scrub(m)
	if m.Compress || m.Truncated {
		return nil, false
	}
	b, err := m.Pack()
	if err != nil || len(b) > size {
		return nil, false
	}
	return b, true
}

// templateWriter stands for an IPv4 UDP client while replies are shaped.
type templateWriter struct{ dns.ResponseWriter }

func (templateWriter) RemoteAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}

// wireName is the uncompressed wire form of a lower-case name.
func wireName(name string) []byte { return wireNameSpelled(strings.ToLower(name)) }

func wireNameSpelled(name string) []byte {
	buf := make([]byte, 256)
	n, err := dns.PackDomainName(dns.Fqdn(name), buf, 0, nil, false)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// fastQuery is what the fast path reads from a query.
type fastQuery struct {
	nameEnd int // offset after the question's name
	qtype   uint16
	edns    bool
	udpSize uint16 // the OPT record's, when edns
	do      byte   // the OPT record's DO bit (0x80) in its flags' first byte
}

// parseFastQuery reads q when it is a query the fast path may answer: one
// question of class IN, nothing else but an optional plain OPT record
// (version 0, no options, no flags but DO), a name of letters, digits, '-'
// and '_' without compression. key receives the lower-case name and type.
func parseFastQuery(q []byte, key []byte) (fastQuery, []byte, bool) {
	var fq fastQuery
	if len(q) < 12+1+4 || len(q) > fastMaxQuery {
		return fq, key, false
	}
	if q[2]&0xf8 != 0 { // QR set or an opcode other than QUERY
		return fq, key, false
	}
	qd, an, ns, ar := binary.BigEndian.Uint16(q[4:]), binary.BigEndian.Uint16(q[6:]), binary.BigEndian.Uint16(q[8:]), binary.BigEndian.Uint16(q[10:])
	if qd != 1 || an != 0 || ns != 0 || ar > 1 {
		return fq, key, false
	}
	i := 12
	for {
		if i >= len(q) {
			return fq, key, false
		}
		l := int(q[i])
		key = append(key, q[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(q) || i-12+l > 254 {
			return fq, key, false
		}
		for _, c := range q[i : i+l] {
			switch {
			case c >= 'A' && c <= 'Z':
				c += 'a' - 'A'
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			default:
				return fq, key, false
			}
			key = append(key, c)
		}
		i += l
	}
	fq.nameEnd = i
	if i-12 > 255 {
		return fq, key, false
	}
	if i+4 > len(q) || binary.BigEndian.Uint16(q[i+2:]) != dns.ClassINET {
		return fq, key, false
	}
	fq.qtype = binary.BigEndian.Uint16(q[i:])
	key = append(key, q[i], q[i+1])
	i += 4
	if ar == 1 {
		// root name, TYPE OPT, CLASS size, TTL: ext. rcode 0, version 0,
		// flags DO or none; RDLENGTH 0.
		if i+11 != len(q) || q[i] != 0 || binary.BigEndian.Uint16(q[i+1:]) != dns.TypeOPT ||
			q[i+5] != 0 || q[i+6] != 0 || q[i+7]&0x7f != 0 || q[i+8] != 0 || q[i+9] != 0 || q[i+10] != 0 {
			return fq, key, false
		}
		fq.edns = true
		fq.udpSize = binary.BigEndian.Uint16(q[i+3:])
		fq.do = q[i+7] & 0x80
		i += 11
	}
	if i != len(q) {
		return fq, key, false
	}
	return fq, key, true
}

// answer writes to out the reply to q, or returns nil when the chain must
// answer q. keyBuf is scratch space of 256+2 bytes or more.
func (t *fastTable) answer(out, q, keyBuf []byte) ([]byte, *fastEntry) {
	if t == nil || t.off {
		return nil, nil
	}
	fq, key, ok := parseFastQuery(q, keyBuf[:0])
	if !ok {
		return nil, nil
	}
	return t.answerParsed(out, q, fq, key)
}

// answerParsed is answer for a query parseFastQuery read as fq, key.
func (t *fastTable) answerParsed(out, q []byte, fq fastQuery, key []byte) ([]byte, *fastEntry) {
	if t == nil || t.off {
		return nil, nil
	}
	e := t.exact[string(key)]
	if e == nil {
		name := key[:len(key)-2]
		switch {
		case below(name, t.appsZone):
			e = t.apps[fq.qtype]
		case t.known[string(name)]:
		case below(name, t.zone):
			e = t.nx[fq.qtype]
		}
		if e == nil {
			return nil, nil
		}
	}
	r, limit := &e.plain, dns.MinMsgSize
	if fq.edns {
		r = &e.edns
		// The bufsize directive caps the client's size at ours before the
		// reply reuses the client's OPT record.
		fq.udpSize = min(fq.udpSize, ednsBufSize)
		limit = max(int(fq.udpSize), dns.MinMsgSize)
	}
	if !r.ok {
		return nil, nil
	}
	name := q[12:fq.nameEnd]
	n := len(r.pieces[len(r.pieces)-1])
	for _, p := range r.pieces[:len(r.pieces)-1] {
		n += len(p) + len(name)
	}
	if n > limit || n > cap(out) {
		return nil, nil // the chain truncates
	}
	out = out[:0]
	for i, p := range r.pieces {
		if i > 0 {
			out = append(out, name...)
		}
		out = append(out, p...)
	}
	out[0], out[1] = q[0], q[1]
	out[2] |= q[2] & 0x01 // RD
	out[3] |= q[3] & 0x10 // CD
	if fq.edns {
		// The reply's OPT record (the last 11 bytes) is the client's:
		// its size, as capped, and its DO bit.
		binary.BigEndian.PutUint16(out[len(out)-8:], fq.udpSize)
		out[len(out)-4] |= fq.do
	}
	return out, e
}

// forwarded reports whether the chain forwards the name of key (the
// lower-case wire name and type) whatever the cluster view: not the zone
// or below it, not a name the cluster plugin answers in this view (the
// PTR names of members and VIPs), not a single label (a member's short
// name, now or later), not a .local name when mDNS answers those. Reverse
// names that may later become a member's are seen again in every view:
// the table of the view is asked before the cache.
func (t *fastTable) forwarded(key []byte, mdns bool) bool {
	name := key[:len(key)-2]
	switch {
	case t == nil || len(name) == 0:
		return false
	case bytes.Equal(name, t.zone) || below(name, t.zone) || t.known[string(name)]:
		return false
	case len(name) > 1 && int(name[0])+2 == len(name):
		return false // a single label
	case mdns && bytes.HasSuffix(name, []byte("\x05local\x00")):
		return false
	}
	return true
}

// below reports whether the wire name is strictly below the wire name
// parent, at a label boundary.
func below(name, parent []byte) bool {
	if len(name) <= len(parent) || !bytes.HasSuffix(name, parent) {
		return false
	}
	for i := 0; i < len(name); i += int(name[i]) + 1 {
		if i == len(name)-len(parent) {
			return true
		}
	}
	return false
}
