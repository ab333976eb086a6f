package bootstrap

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"text/template"

	"appliance/internal/cluster"
)

// The files that make a node resolve through its own DNS first, as the
// NetworkManager-managed nodes of OpenShift's on-prem platforms do
// (MCO's resolv-prepender), with the node's own address where OpenShift
// puts a VIP-routed one.
const (
	// ResolvDispatcherPath is a NetworkManager dispatcher script: on the
	// events that may change NetworkManager's DNS settings it restarts
	// ResolvUnit, and does nothing else.
	ResolvDispatcherPath = "/etc/NetworkManager/dispatcher.d/30-appliance-resolv"
	// ResolvNMConfPath tells NetworkManager to leave /etc/resolv.conf to
	// the script (it keeps writing its view to /run/NetworkManager/resolv.conf,
	// which the script reads and the DNS forwards to).
	ResolvNMConfPath = "/etc/NetworkManager/conf.d/99-appliance-resolv.conf"
	// ResolvScriptPath does the work: /etc/resolv.conf from NetworkManager's,
	// or systemd-resolved's drop-in ResolvedConfPath where the host resolves
	// through it; then ResolvDoneFlag.
	ResolvScriptPath = "/usr/local/bin/appliance-resolv"
	// ResolvUnit runs ResolvScriptPath, retrying until it succeeds.
	ResolvUnit     = "appliance-resolv.service"
	ResolvUnitPath = "/etc/systemd/system/" + ResolvUnit
	// KubeletResolvDropinPath holds the kubelet until ResolvDoneFlag exists.
	KubeletResolvDropinPath = "/etc/systemd/system/kubelet.service.d/30-appliance-wait-resolv.conf"

	// ResolvDoneFlag is left by the script once this node's own DNS is in
	// place; /run, so every boot starts without it.
	ResolvDoneFlag = "/run/appliance-resolv/done"
	// ResolvedConfPath is written at run time by the script on a host whose
	// systemd-resolved is enabled (OKD); Ignition never writes it.
	ResolvedConfPath = "/etc/systemd/resolved.conf.d/60-appliance.conf"
)

// resolvNMConf is the NetworkManager drop-in.
const resolvNMConf = `# Written by appliance: /etc/resolv.conf is rewritten by
# ` + ResolvScriptPath + ` (run by ` + ResolvUnit + `)
# with this node's own address first; NetworkManager keeps its view in
# /run/NetworkManager/resolv.conf.
[main]
rc-manager=unmanaged
`

// resolvDispatcher decides which events matter and hands the work to a
// unit. Not done here: NetworkManager runs dispatcher scripts one at a time
// and kills one after 90 s, while the rewrite may wait for DHCP's
// nameservers and must be retried when it fails; a oneshot unit has
// neither limit. restart, not start: a run already under way may have read
// NetworkManager's file before this change.
var resolvDispatcher = template.Must(template.New("dispatcher").Parse(`#!/bin/bash
# Written by appliance ({{.Domain}}): on the NetworkManager events that may
# change its DNS settings, restarts {{.Unit}}, which puts this node's own
# address first in /etc/resolv.conf ({{.Script}}).
# The work runs in that unit, not here: NetworkManager runs dispatcher
# scripts one at a time and kills one after 90 s, and the rewrite may wait
# for DHCP's nameservers. restart, not start: a run already under way may
# have read NetworkManager's file before this change.
set -u
run=${APPLIANCE_RESOLV_RUN:-{{.RunDir}}}
case "${2:-}" in
dns-change)
	# NetworkManager >= 1.42 sends this on every change of its DNS
	# settings; from the first one on, the events below carry nothing new.
	mkdir -p "$run" && touch "$run/dns-change-seen"
	;;
up | down | dhcp4-change | dhcp6-change | reapply | vpn-up | vpn-down)
	# Older NetworkManager: the events that change its DNS settings.
	[ -e "$run/dns-change-seen" ] && exit 0
	;;
*) exit 0 ;;
esac
echo "appliance-resolv: ${1:-} ${2:-}: restarting {{.Unit}}" >&2
exec systemctl --no-block restart {{.Unit}}
`))

// resolvScript finds the node's address on the machine networks (never a
// VIP, which moves between nodes) and puts it before NetworkManager's
// nameservers. The node's hostNetwork pods get the same file, so the
// address must be one they reach too, not loopback. Until the node has an
// address the file is NetworkManager's own (plus the search rule), so the
// node resolves as it did before, and the kubelet waits.
var resolvScript = template.Must(template.New("resolv").Parse(`#!/bin/bash
# Written by appliance ({{.Domain}}), run by {{.Unit}}: puts this node's
# own address first in /etc/resolv.conf so the node and its hostNetwork pods
# resolve the cluster's names (api-int, *.apps, the nodes) through the
# appliance's DNS, then NetworkManager's nameservers, which the appliance
# forwards everything else to; the cluster domain first in the search list.
# Where systemd-resolved is enabled, its drop-in instead. Then leaves
# {{.Done}}, which the kubelet waits for.
set -uf # -f: no globbing of the words read below
nm=${APPLIANCE_NM_RESOLV:-/run/NetworkManager/resolv.conf}
out=${APPLIANCE_RESOLV:-/etc/resolv.conf}
run=${APPLIANCE_RESOLV_RUN:-{{.RunDir}}}
resolved=${APPLIANCE_RESOLVED_CONF:-{{.Resolved}}}
wait=${APPLIANCE_RESOLV_WAIT:-60}
domain={{.Domain}}
machine_networks=({{.CIDRs}})
vips=" {{.VIPs}} "
done_flag=$run/done
tmp=""
trap '[ -z "$tmp" ] || rm -f -- "$tmp"' EXIT
trap 'exit 143' TERM INT
log() { echo "appliance-resolv: $*" >&2; }

# replace TMP DEST: DEST becomes TMP, atomically and 0644, only when they
# differ (an unchanged file keeps its inode and mtime); 1 when unchanged.
replace() {
	if cmp -s "$1" "$2"; then
		rm -f -- "$1"
		return 1
	fi
	chmod 0644 "$1" && mv -fZ -- "$1" "$2" && return 0
	log "cannot replace $2"
	exit 1
}

# DHCP may hand out nameservers after the address. Until this node is set
# up once (the kubelet waits, and its pods copy the file), wait for them;
# not forever: a node without any upstream still resolves the cluster's
# names through its own DNS.
if [ ! -e "$done_flag" ]; then
	for ((i = 0; i < wait * 2; i++)); do
		grep -qsE '^[[:space:]]*nameserver[[:space:]]' "$nm" && break
		[ "$i" = 0 ] && log "no nameserver in $nm yet; waiting up to ${wait}s"
		sleep 0.5
	done
fi
[ -r "$nm" ] || nm=/dev/null

self=""
for net in "${machine_networks[@]}"; do
	while read -r _ _ _ addr rest; do
		addr=${addr%/*}
		case "$vips" in *" $addr "*) continue ;; esac
		case " $rest " in *" dadfailed "*) continue ;; esac
		self=$addr
		break 2
	done < <(ip -o addr show to "$net" scope global 2>/dev/null)
done

# The cluster domain first, NetworkManager's domains after it, each once.
# The resolver reads the last search or domain line.
theirs=""
while read -r key rest; do
	case "$key" in search | domain) theirs=$rest ;; esac
done <"$nm"
search=$domain
for d in $theirs; do
	case " $search " in *" ${d%.} "*) ;; *) search+=" $d" ;; esac
done

servers=()
[ -n "$self" ] && servers+=("$self")
while read -r key addr _; do
	[ "$key" = nameserver ] && [ -n "$addr" ] && [ "$addr" != "$self" ] && servers+=("$addr")
done <"$nm"

mkdir -p "$run" || exit 1
if systemctl -q is-enabled systemd-resolved 2>/dev/null; then
	# /etc/resolv.conf is resolved's stub; NetworkManager hands resolved
	# its own servers. This node's DNS goes in as the global server.
	if [ -z "$self" ]; then
		log "no address of this node in ${machine_networks[*]} yet; the kubelet waits"
		exit 0
	fi
	mkdir -p "${resolved%/*}" || exit 1
	tmp=$(mktemp "$resolved.XXXXXX") || exit 1
	printf '# Written by %s\n[Resolve]\nDNS=%s\nDomains=%s\n' "$0" "$self" "$search" >"$tmp"
	# The flag goes first, so an interrupted run restarts resolved next time;
	# a run with nothing new restarts nothing.
	if [ ! -e "$resolved" ] || ! cmp -s "$tmp" "$resolved"; then
		rm -f -- "$done_flag"
	fi
	replace "$tmp" "$resolved" && log "wrote $resolved: DNS=$self Domains=$search"
	if [ ! -e "$done_flag" ]; then
		if systemctl -q is-active systemd-resolved; then
			log "restarting systemd-resolved"
			systemctl restart systemd-resolved || exit 1
		fi
		touch "$done_flag" || exit 1
	fi
	exit 0
fi

tmp=$(mktemp "$out.appliance.XXXXXX") || exit 1
{
	echo "# Generated by $0 from $nm"
	echo "search $search"
	n=0
	for s in ${servers[@]+"${servers[@]}"}; do
		if [ "$n" -lt 3 ]; then
			echo "nameserver $s"
		else
			echo "# nameserver $s (the resolver reads the first 3 only)"
		fi
		n=$((n + 1))
	done
	grep -vE '^[[:space:]]*((search|domain|nameserver)([[:space:]]|$)|[#;]|$)' "$nm"
} >"$tmp"
if replace "$tmp" "$out"; then
	log "wrote $out: nameservers ${servers[*]-none}, search $search"
	# NetworkManager looks the host name up again now that DNS works.
	nmcli general reload dns-rc >/dev/null 2>&1 || true
fi
if [ -z "$self" ]; then
	log "no address of this node in ${machine_networks[*]} yet; the kubelet waits"
	exit 0
fi
touch "$done_flag" || exit 1
`))

// resolvUnit runs the script; the dispatcher and the kubelet start it.
var resolvUnit = template.Must(template.New("unit").Parse(`# Written by appliance: started by the kubelet ({{.Dropin}})
# and restarted by NetworkManager's dispatcher ({{.Dispatcher}}).
[Unit]
Description=Put this node's own DNS (the appliance) first in /etc/resolv.conf
# Restarted on every DNS change: no rate limit.
StartLimitIntervalSec=0

[Service]
Type=oneshot
# Retried here: systemd before 244 has no Restart= for oneshot units.
ExecStart=/bin/bash -c 'until {{.Script}}; do sleep 10; done'
`))

// kubeletDropin holds the kubelet until the script is done, as MCO's
// 10-mco-on-prem-wait-resolv.conf does, and starts the script itself so
// the kubelet never depends on a dispatcher event alone.
var kubeletDropin = template.Must(template.New("dropin").Parse(`# Written by appliance: the kubelet starts once {{.Unit}} has put this
# node's own DNS in place; its pods copy /etc/resolv.conf.
[Unit]
Wants={{.Unit}}
After={{.Unit}}

[Service]
# 255 fails the start, and the kubelet's Restart= tries again (and starts
# {{.Unit}} again); 1 to 254 would skip the kubelet for good.
ExecCondition=/bin/bash -c '[ -e {{.Done}} ] || { echo "waiting for {{.Unit}}: no address in the machine network yet, or DNS not configured"; exit 255; }'
`))

// ResolvFiles are the files that make the node resolve through its own
// DNS: the dispatcher script, the NetworkManager drop-in, the script, its
// unit and the kubelet's drop-in.
func ResolvFiles(cfg *cluster.Config) ([]File, error) {
	var cidrs, vips []string
	for _, p := range cfg.Network.MachineCIDRs {
		cidrs = append(cidrs, p.String())
	}
	for _, set := range [][]netip.Addr{cfg.Network.APIVIPs, cfg.Network.IngressVIPs} {
		for _, a := range set {
			vips = append(vips, a.String())
		}
	}
	data := struct {
		Domain, CIDRs, VIPs, Unit, Script, Done, RunDir, Resolved, Dispatcher, Dropin string
	}{
		Domain: cfg.Cluster.Domain(), CIDRs: strings.Join(cidrs, " "), VIPs: strings.Join(vips, " "),
		Unit: ResolvUnit, Script: ResolvScriptPath, Done: ResolvDoneFlag,
		RunDir: strings.TrimSuffix(ResolvDoneFlag, "/done"), Resolved: ResolvedConfPath,
		Dispatcher: ResolvDispatcherPath, Dropin: KubeletResolvDropinPath,
	}
	out := []File{
		{Path: ResolvDispatcherPath, Mode: 0o755},
		{Path: ResolvNMConfPath, Mode: 0o644, Contents: []byte(resolvNMConf)},
		{Path: ResolvScriptPath, Mode: 0o755},
		{Path: ResolvUnitPath, Mode: 0o644},
		{Path: KubeletResolvDropinPath, Mode: 0o644},
	}
	for i, t := range map[int]*template.Template{0: resolvDispatcher, 2: resolvScript, 3: resolvUnit, 4: kubeletDropin} {
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("bootstrap: %s: %w", out[i].Path, err)
		}
		out[i].Contents = b.Bytes()
	}
	return out, nil
}
