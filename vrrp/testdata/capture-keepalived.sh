#!/bin/bash
# Captures the adverts keepalived sends for one config and prints them in
# the format of keepalived-*.hex (source, destination, TTL, VRRP payload hex),
# one line per distinct priority; paste them under the file's comment.
# Needs root, keepalived and tcpdump.
#
# usage: capture-keepalived.sh KEEPALIVED.CONF [SECONDS]
#
# Everything happens in a throwaway network namespace holding a veth pair
# (va, 192.168.126.10/24 + fd00:126::10/64; the peer vb is where tcpdump
# listens); the root namespace is never touched. The config must use
# "interface va".
set -eu
conf=$(readlink -f "$1")
dur=${2:-5}
ns=vrrpcap-$$
dir=$(mktemp -d /tmp/vrrpcap.XXXXXX)
tdpid=
cleanup() {
	[ -s "$dir/ka.pid" ] && kill "$(cat "$dir/ka.pid")" 2>/dev/null || true
	[ -n "$tdpid" ] && kill "$tdpid" 2>/dev/null || true
	sleep 0.5
	ip netns del "$ns" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
nsx() { ip netns exec "$ns" "$@"; }
ip netns add "$ns"
nsx ip link set lo up
nsx ip link add va type veth peer name vb
nsx ip link set va address 52:54:00:7e:00:10
nsx ip addr add 192.168.126.10/24 dev va
nsx ip -6 addr add fd00:126::10/64 dev va nodad
nsx ip link set vb up
nsx ip link set va up
sleep 2.5 # link-local address leaves DAD
nsx tcpdump -i vb -U -w "$dir/cap.pcap" 'ip proto 112 or ip6 proto 112' 2>/dev/null &
tdpid=$!
sleep 1
nsx keepalived -n -l -D -P -f "$conf" -p "$dir/ka.pid" -r "$dir/ka-vrrp.pid" -c "$dir/ka-chk.pid" >"$dir/ka.log" 2>&1 &
sleep "$dur"
kill "$(cat "$dir/ka.pid")"
sleep 1.5 # the priority 0 advert on the way out
kill "$tdpid"
wait "$tdpid" 2>/dev/null || true
tdpid=
# tcpdump -x dumps the packet from the IP header on; cut the header off.
tcpdump -r "$dir/cap.pcap" -nn -x 2>/dev/null | awk '
function flush(   h, v, ihl, src, dst, ttl, pl, i, n) {
	if (hex == "") return
	v = substr(hex, 1, 1)
	if (v == "4") {
		ihl = hx(substr(hex, 2, 1)) * 8
		ttl = hx(substr(hex, 17, 2))
		src = ""; dst = ""
		for (i = 0; i < 4; i++) {
			src = src (i ? "." : "") hx(substr(hex, 25 + 2*i, 2))
			dst = dst (i ? "." : "") hx(substr(hex, 33 + 2*i, 2))
		}
		pl = substr(hex, ihl + 1)
	} else {
		ttl = hx(substr(hex, 15, 2))
		src = addr6(substr(hex, 17, 32)); dst = addr6(substr(hex, 49, 32))
		pl = substr(hex, 81)
	}
	prio = substr(pl, 5, 2)
	if (!(prio in seen)) { seen[prio] = 1; print src, dst, ttl, pl }
	hex = ""
}
function hx(h,   i, n) {
	n = 0
	for (i = 1; i <= length(h); i++) n = n * 16 + index("0123456789abcdef", tolower(substr(h, i, 1))) - 1
	return n
}
function addr6(h,   i, s, g) {
	s = ""
	for (i = 0; i < 8; i++) { g = sprintf("%x", hx(substr(h, 1 + 4*i, 4))); s = s (i ? ":" : "") g }
	return s
}
/^[0-9]/ { flush(); next }
/^\t0x/ { $1 = ""; gsub(/ /, ""); hex = hex $0 }
END { flush() }'
