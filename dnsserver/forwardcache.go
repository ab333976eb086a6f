package dnsserver

import (
	"bytes"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// The forward cache answers forwarded names over UDP before the plugin
// chain, as the cluster fast path answers cluster names. It holds the
// chain's own replies to forwarded questions, captured as the chain writes
// them (fallbackConn.WriteTo), and serves a copy with the query's ID, RD bit,
// spelling of the name and EDNS buffer size written in and every TTL lowered
// by the whole seconds spent in the cache, rounded up. The chain's cache
// plugin writes every TTL of a reply alike, from the same stored item on a
// hit as on the miss that filled it, so the chain's next answer is this
// reply with those fields changed. Keys hold what makes the chain's answers
// differ: the lower-case name, the type, an OPT record or none, and the DO,
// CD and AD bits.

// Key flags, the last byte of a forward cache key.
const (
	fwdEDNS = 1 << iota
	fwdDO
	fwdCD
	fwdAD
)

// Caps of a cached reply's lifetime, as CoreDNS's cache plugin caps its own
// (success 3600 s, denial 1800 s); the server's CacheTTL lowers both.
const (
	fwdMaxPositiveTTL = 3600
	fwdMaxDenialTTL   = 1800
)

// Default bounds of the forward cache: CoreDNS's cache holds 10,000 items
// per kind; replies here are at most 1232 bytes and mostly under 200.
const (
	fwdDefaultEntries = 20000
	fwdDefaultBytes   = 8 << 20
)

// fwdShards is the number of independently locked parts of the cache: the
// readers (one per socket, at most 4) rarely meet on one lock.
const fwdShards = 32

// fwdMaxRRs bounds the records of a cached reply (TTL fields patched per hit).
const fwdMaxRRs = 64

// Prefetch: a hit in the last fwdPrefetchPercent of an entry's life also
// sends the query through the chain, at most once per fwdPrefetchEvery per
// entry, until a reply that outlives the entry by more than fwdRefreshMin
// replaces it. The chain's cache prefetches in the same window (the
// Corefile's "prefetch 1 1m 20%"): the first of these queries finds its item
// in the window and starts the upstream refresh there, a later one brings
// the refreshed item back. Without it a hot name's entry and the chain's
// item expired together, and for the entry's last second (its TTLs count
// whole seconds rounded up) every query for it took the chain and its
// upstream round trip.
const (
	fwdPrefetchPercent = 20
	fwdPrefetchEvery   = int64(100 * time.Millisecond)
	fwdRefreshMin      = int64(time.Second)
)

// fwdEpoch is the monotonic clock's origin for the cache's times.
var fwdEpoch = time.Now()

// fwdNow is nanoseconds on the monotonic clock since fwdEpoch.
func fwdNow() int64 { return int64(time.Since(fwdEpoch)) }

// forwardCache is the shared, bounded cache of forwarded replies.
type forwardCache struct {
	shards [fwdShards]fwdShard
	// gen changes when the upstreams change: entries and fills of another
	// generation are never served.
	gen        atomic.Uint64
	maxEntries int // per shard
	maxBytes   int // per shard
	maxTTL     uint32
}

type fwdShard struct {
	mu    sync.RWMutex
	m     map[string]*fwdEntry
	bytes int
	_     [40]byte // keep shards' locks on separate cache lines
}

// fwdEntry is one cached reply; immutable once stored but for prefetched.
type fwdEntry struct {
	fwdReply
	prefetched atomic.Int64 // fwdNow when a hit last sent a prefetch
	stored     int64        // fwdNow when stored
	gen        uint64       // the cache's generation when the query went to the chain
	request    prometheus.Counter
	response   prometheus.Counter
	result     prometheus.Counter
}

// fwdReply is a parsed reply: the bytes and where its variable fields are.
type fwdReply struct {
	msg     []byte
	nameEnd int      // the question's name is msg[12:nameEnd]
	optOff  int      // offset of the OPT record's CLASS (its size); 0: none
	ttlOff  []uint16 // offsets of the TTL fields, OPT excepted
	ttls    []uint32 // the TTLs as stored
	life    uint32   // seconds the reply may be served: its least TTL, capped
	rcode   int
}

// fwdPending is a query passed to the chain whose reply may fill the cache.
type fwdPending struct {
	key     string
	gen     uint64
	qtype   uint16
	flags   byte
	request prometheus.Counter
	// prefetch: the client had its answer from the cache; the reply only
	// refreshes the entry and is not sent.
	prefetch bool
}

// newForwardCache makes a cache of at most entries replies and bytes bytes
// (about), whose replies live at most maxTTL seconds.
func newForwardCache(entries, bytes int, maxTTL uint32) *forwardCache {
	c := &forwardCache{
		maxEntries: max(entries/fwdShards, 1),
		maxBytes:   max(bytes/fwdShards, 1),
		maxTTL:     maxTTL,
	}
	for i := range c.shards {
		c.shards[i].m = map[string]*fwdEntry{}
	}
	return c
}

// fwdKeyFlags is the last byte of the key of query q as fq reads it.
func fwdKeyFlags(q []byte, fq fastQuery) byte {
	var f byte
	if fq.edns {
		f |= fwdEDNS
		if fq.do != 0 {
			f |= fwdDO
		}
	}
	if q[3]&0x10 != 0 {
		f |= fwdCD
	}
	if q[3]&0x20 != 0 {
		f |= fwdAD
	}
	return f
}

func (c *forwardCache) shard(key []byte) *fwdShard {
	h := uint32(2166136261)
	for _, b := range key {
		h = (h ^ uint32(b)) * 16777619
	}
	return &c.shards[h%fwdShards]
}

// answer writes to out the cached reply to q (fq as parseFastQuery read it,
// key the lower-case name, type and flags byte), or returns nil when none
// is cached and current at now (fwdNow).
func (c *forwardCache) answer(out, q []byte, fq fastQuery, key []byte, now int64) ([]byte, *fwdEntry) {
	s := c.shard(key)
	s.mu.RLock()
	e := s.m[string(key)]
	s.mu.RUnlock()
	if e == nil || e.gen != c.gen.Load() {
		return nil, nil
	}
	r := e.patch(out, q, fq, now-e.stored)
	if r == nil {
		return nil, nil
	}
	return r, e
}

// patch writes the reply to q into out, aged by age nanoseconds; nil when
// it has expired or the chain would have to truncate it.
func (r *fwdReply) patch(out, q []byte, fq fastQuery, age int64) []byte {
	if age < 0 {
		age = 0
	}
	aged := agedSeconds(age)
	if aged >= int64(r.life) {
		return nil
	}
	limit := dns.MinMsgSize
	size := uint16(0)
	if fq.edns {
		size = min(fq.udpSize, ednsBufSize)
		limit = max(int(size), dns.MinMsgSize)
	}
	// Scrub compresses a reply over 1220 bytes to an IPv6 client.
	limit = min(limit, 1220)
	if len(r.msg) > limit || len(r.msg) > cap(out) || fq.nameEnd != r.nameEnd {
		return nil
	}
	out = append(out[:0], r.msg...)
	out[0], out[1] = q[0], q[1]
	out[2] = out[2]&^0x01 | q[2]&0x01 // RD
	copy(out[12:r.nameEnd], q[12:fq.nameEnd])
	if r.optOff != 0 {
		binary.BigEndian.PutUint16(out[r.optOff:], size)
	}
	for i, off := range r.ttlOff {
		binary.BigEndian.PutUint32(out[off:], r.ttls[i]-uint32(aged))
	}
	return out
}

// agedSeconds is age (ns) in whole seconds rounded up: the chain's cache
// counts from when it stored the item, up to a second before the reply was
// taken.
func agedSeconds(age int64) int64 {
	return (max(age, 0) + int64(time.Second) - 1) / int64(time.Second)
}

// expires is fwdNow when e's life ends (it is served until a second
// before: its age counts whole seconds rounded up).
func (e *fwdEntry) expires() int64 { return e.stored + int64(e.life)*int64(time.Second) }

// prefetch reports whether the hit on e at now (fwdNow) should also send
// its query through the chain to refresh e (see fwdPrefetchPercent). Only
// one of the readers hitting e at once gets true.
func (c *forwardCache) prefetch(e *fwdEntry, now int64) bool {
	// The TTL the chain's cache item has left, as it counts it (whole
	// seconds rounded down; the item was stored just before e), against
	// the window in which it prefetches: ceil(20% of its TTL).
	left := int64(e.life) - max(now-e.stored, 0)/int64(time.Second)
	if left*100 > int64(e.life)*fwdPrefetchPercent+99 {
		return false
	}
	last := e.prefetched.Load()
	if last != 0 && now-last < fwdPrefetchEvery {
		return false
	}
	return e.prefetched.CompareAndSwap(last, now)
}

// fill stores the chain's reply to the pending query p, when it may be
// served again; now is fwdNow.
func (c *forwardCache) fill(p *fwdPending, reply []byte, now int64, m *metrics) {
	if p.gen != c.gen.Load() {
		return // the upstreams changed while the query was out
	}
	r, ok := parseFwdReply(reply, []byte(p.key), p.qtype, p.flags, c.maxTTL)
	if !ok {
		return
	}
	r.msg = bytes.Clone(r.msg) // the chain's buffer is reused
	e := &fwdEntry{fwdReply: r, stored: now, gen: p.gen, request: p.request}
	if m != nil {
		e.response = m.response(r.rcode)
		e.result = m.answerBy[resultFallthrough]
	}
	c.store(p.key, e)
}

func (c *forwardCache) store(key string, e *fwdEntry) {
	size := len(key) + len(e.msg) + 6*len(e.ttlOff) + 160
	s := c.shard([]byte(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[key]; old != nil && old.gen == e.gen && old.expires() > e.stored && e.expires() <= old.expires()+fwdRefreshMin {
		// Live and not fresher: the chain answered a prefetch from the item
		// the entry was filled from, or two misses raced. Keep the entry, and
		// with it when it last prefetched.
		return
	}
	if old := s.m[key]; old != nil {
		s.bytes -= len(key) + len(old.msg) + 6*len(old.ttlOff) + 160
		delete(s.m, key)
	}
	if size > c.maxBytes {
		return
	}
	// Random eviction, as CoreDNS's own cache evicts: map iteration starts
	// at a random entry.
	for len(s.m) >= c.maxEntries || s.bytes+size > c.maxBytes {
		for k, old := range s.m {
			s.bytes -= len(k) + len(old.msg) + 6*len(old.ttlOff) + 160
			delete(s.m, k)
			break
		}
	}
	s.m[key] = e
	s.bytes += size
}

// flush drops every entry and every fill in flight.
func (c *forwardCache) flush() {
	c.gen.Add(1)
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.bytes = 0
		s.mu.Unlock()
	}
}

// len is the number of entries held.
func (c *forwardCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// fwdTypes are the query types the forward cache serves: the fast path's.
func fwdType(qtype uint16) bool { return slices.Contains(fastTypes, qtype) }

// parseFwdReply checks that reply, the chain's answer to the question of
// key (lower-case wire name, type, flags byte), may be served again and
// records where its variable fields are. It takes only what the chain's
// cache keeps and the fast path can reproduce: a response to a standard
// query, not truncated, NOERROR with an answer to the question (or NODATA
// with an SOA) or NXDOMAIN with an SOA, uncompressed, no TSIG, and an OPT
// record without options exactly when the query had one, its DO bit the
// query's. maxTTL caps the lifetime (0: no cap beyond CoreDNS's).
func parseFwdReply(reply, key []byte, qtype uint16, flags byte, maxTTL uint32) (fwdReply, bool) {
	var r fwdReply
	if len(key) < 3 || len(reply) < 12 || len(reply) > ednsBufSize {
		return r, false
	}
	name := key[:len(key)-3]
	// QR, opcode QUERY, no TC.
	if reply[2]&0x80 == 0 || reply[2]&0x7a != 0 {
		return r, false
	}
	r.rcode = int(reply[3] & 0x0f)
	if r.rcode != dns.RcodeSuccess && r.rcode != dns.RcodeNameError {
		return r, false
	}
	// AD as the chain clears it: a reply to a query with neither DO nor AD
	// has none.
	qd, an, ns, ar := binary.BigEndian.Uint16(reply[4:]), binary.BigEndian.Uint16(reply[6:]), binary.BigEndian.Uint16(reply[8:]), binary.BigEndian.Uint16(reply[10:])
	if qd != 1 || int(an)+int(ns)+int(ar) > fwdMaxRRs {
		return r, false
	}
	i, ok := fwdName(reply, 12)
	if !ok || i-12 != len(name) || !equalFoldWire(reply[12:i], name) {
		return r, false
	}
	r.nameEnd = i
	if i+4 > len(reply) || binary.BigEndian.Uint16(reply[i:]) != qtype || binary.BigEndian.Uint16(reply[i+2:]) != dns.ClassINET {
		return r, false
	}
	i += 4
	type rr struct {
		owner, rdata [2]int
		rrtype       uint16
	}
	var answers [fwdMaxRRs]rr
	hasSOA := false
	var soaMin uint32
	life := uint32(1<<31 - 1)
	for n := range int(an) + int(ns) + int(ar) {
		start := i
		if i, ok = fwdName(reply, i); !ok || i+10 > len(reply) {
			return r, false
		}
		t := binary.BigEndian.Uint16(reply[i:])
		class := binary.BigEndian.Uint16(reply[i+2:])
		ttl := binary.BigEndian.Uint32(reply[i+4:])
		rdlen := int(binary.BigEndian.Uint16(reply[i+8:]))
		rdata := [2]int{i + 10, i + 10 + rdlen}
		if rdata[1] > len(reply) {
			return r, false
		}
		switch {
		case t == dns.TypeOPT:
			// The last record, in the additional section, at the root,
			// no options, version 0, DO as asked.
			if n != int(an)+int(ns)+int(ar)-1 || n < int(an)+int(ns) || i-start != 1 || rdlen != 0 ||
				flags&fwdEDNS == 0 || reply[i+4] != 0 || reply[i+5] != 0 ||
				(reply[i+6]&0x80 != 0) != (flags&fwdDO != 0) {
				return r, false
			}
			r.optOff = i + 2
		case t == dns.TypeTSIG || t == dns.TypeSIG && n >= int(an)+int(ns):
			return r, false
		default:
			if class != dns.ClassINET {
				return r, false
			}
			if t == dns.TypeSOA && n >= int(an) && n < int(an)+int(ns) && rdlen >= 20 {
				hasSOA = true
				soaMin = binary.BigEndian.Uint32(reply[rdata[1]-4:])
			}
			if n < int(an) {
				answers[n] = rr{owner: [2]int{start, i}, rdata: rdata, rrtype: t}
			}
			r.ttlOff = append(r.ttlOff, uint16(i+4))
			r.ttls = append(r.ttls, ttl)
			life = min(life, ttl)
		}
		i = rdata[1]
	}
	if i != len(reply) || (r.optOff != 0) != (flags&fwdEDNS != 0) || len(r.ttls) == 0 {
		return r, false
	}
	if flags&(fwdDO|fwdAD) == 0 && reply[3]&0x20 != 0 {
		return r, false
	}
	// Which of the chain's caches would hold it: an answer to the
	// question, following CNAMEs, is a success; NODATA and NXDOMAIN need
	// an SOA (RFC 2308).
	positive := false
	if r.rcode == dns.RcodeSuccess && an > 0 {
		at := [2]int{12, r.nameEnd}
		for range an {
			next := [2]int{}
			for _, a := range answers[:an] {
				if a.rrtype == dns.TypeCNAME && equalFoldWire(reply[a.owner[0]:a.owner[1]], reply[at[0]:at[1]]) {
					if qtype == dns.TypeCNAME {
						positive = true
					}
					if end, ok := fwdName(reply, a.rdata[0]); ok && end == a.rdata[1] {
						next = a.rdata
					}
					break
				}
			}
			if positive || next[1] == 0 {
				break
			}
			at = next
		}
		for _, a := range answers[:an] {
			if a.rrtype == qtype && equalFoldWire(reply[a.owner[0]:a.owner[1]], reply[at[0]:at[1]]) {
				positive = true
			}
		}
	}
	capTTL := uint32(fwdMaxPositiveTTL)
	if !positive {
		if !hasSOA {
			return r, false
		}
		capTTL = fwdMaxDenialTTL
		life = min(life, soaMin)
	}
	if maxTTL > 0 {
		capTTL = min(capTTL, maxTTL)
	}
	r.life = min(life, capTTL)
	if r.life == 0 {
		return r, false
	}
	r.msg = reply
	return r, true
}

// fwdName reads an uncompressed name starting at i and returns the offset
// after it; a compression pointer, a bad label or a cut name is not ok.
func fwdName(b []byte, i int) (int, bool) {
	start := i
	for {
		if i >= len(b) {
			return 0, false
		}
		l := int(b[i])
		if l == 0 {
			i++
			return i, i-start <= 255
		}
		if l > 63 {
			return 0, false
		}
		i += l + 1
	}
}

// equalFoldWire compares two wire names ASCII-case-insensitively.
func equalFoldWire(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
