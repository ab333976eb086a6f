package nodeip

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"strings"
)

// HintFilePath is the EnvironmentFile of MCO's nodeip-configuration.service
// (every variant: _base for platforms none and external, on-prem, kubevirt,
// vsphere-upi).
const HintFilePath = "/etc/default/nodeip-configuration"

// The variables the units read. Every variant passes ${NODEIP_HINT} to
// runtimecfg; _base, kubevirt and vsphere-upi fall back to
// ${KUBELET_NODEIP_HINT} when it is empty, the on-prem one does not.
const (
	HintVar        = "NODEIP_HINT"
	KubeletHintVar = "KUBELET_NODEIP_HINT"
)

// HintFile is the file's contents for hints. It sets NODEIP_HINT only:
// that is the one variable every variant reads, and the one _base prefers,
// so the hints reach runtimecfg on every platform. The unit expands it
// unquoted, so several hints (one per family) become several arguments.
func HintFile(hints []netip.Addr) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by appliance: read by OpenShift's nodeip-configuration.service, whose\n")
	b.WriteString("# `runtimecfg node-ip set` gives the kubelet the address of the interface whose\n")
	b.WriteString("# network holds a hint (one per address family): the node's machine-network address.\n")
	strs := make([]string, len(hints))
	for i, h := range hints {
		strs[i] = h.String()
	}
	fmt.Fprintf(&b, "%s=\"%s\"\n", HintVar, strings.Join(strs, " "))
	return b.Bytes()
}

// Hints is what a hint file gives runtimecfg.
type Hints struct {
	// Var is the variable the hints came from: HintVar, or KubeletHintVar
	// when NODEIP_HINT is empty (read by every variant but on-prem's);
	// "" when neither is set.
	Var   string
	Addrs []netip.Addr
}

// ParseHintFile reads an EnvironmentFile as systemd does for the lines
// that matter here (KEY=value, optionally quoted; # and ; comments) and
// returns the hints nodeip-configuration passes on. A word that is not an
// address is an error: runtimecfg refuses it and the kubelet never starts.
func ParseHintFile(b []byte) (Hints, error) {
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		vars[k] = v
	}
	if err := sc.Err(); err != nil {
		return Hints{}, fmt.Errorf("nodeip: read %s: %w", HintFilePath, err)
	}
	var h Hints
	switch {
	case strings.TrimSpace(vars[HintVar]) != "":
		h.Var = HintVar
	case strings.TrimSpace(vars[KubeletHintVar]) != "":
		h.Var = KubeletHintVar
	default:
		return h, nil
	}
	for _, w := range strings.Fields(vars[h.Var]) {
		a, err := netip.ParseAddr(w)
		if err != nil {
			return Hints{}, fmt.Errorf("nodeip: %s=%q: %q is not an IP address, and runtimecfg refuses it", h.Var, vars[h.Var], w)
		}
		h.Addrs = append(h.Addrs, a)
	}
	return h, nil
}
