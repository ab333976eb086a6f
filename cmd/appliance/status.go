package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"appliance/app/node"
	"appliance/dhcp"
	"appliance/dnsserver"
	"appliance/internal/cluster"
	"appliance/internal/host"
	"appliance/lb"
	"appliance/vrrp"
)

func newStatusCmd() *cobra.Command {
	var addr string
	var raw bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what a running appliance is doing (reads its admin /status)",
		Long: `Read the admin /status of a running appliance and print one table per
section it has: the node, its VIPs, the LB pools, DNS and mDNS, the cluster
members and DHCP. --json prints the document as it is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: 5 * time.Second}
			resp, err := client.Get("http://" + addr + "/status")
			if err != nil {
				return fmt.Errorf("status: is an appliance running with its admin listener on %s? (--admin): %w", addr, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return fmt.Errorf("status: read %s: %w", addr, err)
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status: %s answered %s: %s", addr, resp.Status, bytes.TrimSpace(body))
			}
			if raw {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			if err := printAdminStatus(cmd.OutOrStdout(), body, time.Now()); err != nil {
				return fmt.Errorf("status: %s answered something else than a status: %w", addr, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "admin", cluster.DefaultAdminListen, "admin listener of the appliance to ask (its admin.listen or --admin-listen)")
	cmd.Flags().BoolVar(&raw, "json", false, "print the raw JSON")
	return cmd
}

// statusDrawn are the sections printAdminStatus draws, in its order; "host" is
// drawn with "node". Any other section is only named.
var statusDrawn = []string{"node", "host", "vips", "lb", "dns", "members", "dhcp"}

// printAdminStatus draws the /status document body as of now. Each section is
// decoded on its own: one that is missing, null or of another shape (an
// appliance of another version) costs only its own table. It fails only
// when body is not a JSON object.
func printAdminStatus(w io.Writer, body []byte, now time.Time) error {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return err
	}
	if doc == nil {
		return fmt.Errorf("the document is %s", bytes.TrimSpace(body))
	}
	p := &statusPrinter{now: now}
	if doc["node"] != nil || doc["host"] != nil {
		p.node(doc["node"], doc["host"])
	}
	if raw, ok := doc["vips"]; ok {
		p.vips(raw)
	}
	if raw, ok := doc["lb"]; ok {
		p.lb(raw)
	}
	if raw, ok := doc["dns"]; ok {
		p.dns(raw)
	}
	if raw, ok := doc["members"]; ok {
		p.members(raw)
	}
	if raw, ok := doc["dhcp"]; ok {
		p.dhcp(raw)
	}
	var other []string
	for name := range doc {
		if !slices.Contains(statusDrawn, name) {
			other = append(other, name)
		}
	}
	if len(other) > 0 {
		slices.Sort(other)
		p.title("OTHER SECTIONS")
		fmt.Fprintf(&p.out, "%s (not drawn here; see appliance status --json)\n", strings.Join(other, ", "))
	}
	if len(doc) == 0 {
		p.out.WriteString("The appliance reports no section.\n")
	}
	_, err := w.Write(p.out.Bytes())
	return err
}

// statusPrinter gathers the whole output first, so that a failed write is
// reported once and a table never ends half drawn.
type statusPrinter struct {
	out bytes.Buffer
	now time.Time
}

// title starts a table, a blank line after the previous one.
func (p *statusPrinter) title(s string) {
	if p.out.Len() > 0 {
		p.out.WriteByte('\n')
	}
	p.out.WriteString(s + "\n")
}

// table returns a tabwriter with its header written; the caller flushes it.
func (p *statusPrinter) table(header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(&p.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

// row writes one table line; empty cells show as "-" so columns stay
// readable (and splittable on blanks).
func row(tw *tabwriter.Writer, cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
}

// decodeSection decodes one section into v, or says under the section's
// title why it cannot.
func (p *statusPrinter) decodeSection(title string, raw json.RawMessage, v any) bool {
	if err := json.Unmarshal(raw, v); err != nil {
		p.title(title)
		p.unreadable(strings.ToLower(title), err)
		return false
	}
	return true
}

func (p *statusPrinter) unreadable(section string, err error) {
	fmt.Fprintf(&p.out, "cannot read the %s section (%v); see appliance status --json\n", section, err)
}

// ago says when t was relative to now: "5s ago", "in 59m0s", or "" (drawn
// as "-") for a zero time.
func (p *statusPrinter) ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := p.now.Sub(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// joinText joins the text forms of addresses, prefixes or ports.
func joinText[T fmt.Stringer](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

func (p *statusPrinter) node(nodeRaw, hostRaw json.RawMessage) {
	p.title("NODE")
	// Two sections make this table: either may be unreadable alone.
	if string(nodeRaw) == "null" {
		nodeRaw = nil
	}
	var n node.Status
	if nodeRaw != nil {
		if err := json.Unmarshal(nodeRaw, &n); err != nil {
			p.unreadable("node", err)
			nodeRaw = nil
		}
	}
	var v *host.View
	if hostRaw != nil {
		if err := json.Unmarshal(hostRaw, &v); err != nil {
			p.unreadable("host", err)
			v = nil
		}
	}
	if nodeRaw == nil && v == nil {
		p.out.WriteString("not reported\n")
		return
	}
	name, role := n.Name, n.Role
	var iface, addrs string
	var notes []string
	if v != nil {
		if name == "" {
			name = v.Name
		}
		if role == "" {
			role = v.Role
		}
		iface, addrs = v.Interface, joinText(v.Prefixes)
		if v.Pinned {
			notes = append(notes, "interface pinned")
		}
		if v.Interface != "" && !v.Up {
			notes = append(notes, "interface down")
		}
		if !v.Configured && v.Name != "" {
			notes = append(notes, "not in the config")
		}
		if v.Warning != "" {
			notes = append(notes, v.Warning)
		}
		if v.Problem != "" {
			notes = append(notes, v.Problem)
		}
	}
	tw := p.table("NAME", "ROLE", "INTERFACE", "ADDRESSES", "SERVICES", "NOTES")
	row(tw, name, string(role), iface, addrs, n.Plan, strings.Join(notes, "; "))
	tw.Flush()
}

func (p *statusPrinter) vips(raw json.RawMessage) {
	var vips []vrrp.Status
	if !p.decodeSection("VIPS", raw, &vips) {
		return
	}
	p.title("VIPS")
	if len(vips) == 0 {
		p.out.WriteString("no virtual router\n")
		return
	}
	tw := p.table("INSTANCE", "VIP", "VRID", "STATE", "PRIO", "MASTER", "SINCE", "TRANSPORT", "NOTES")
	for _, v := range vips {
		var notes []string
		for _, s := range []string{v.Fault, v.Collision} {
			if s != "" {
				notes = append(notes, s)
			}
		}
		for _, s := range v.Strangers {
			notes = append(notes, fmt.Sprintf("%s is no peer: %d adverts dropped (priority %d, last %s)",
				s.Addr, s.Count, s.Priority, p.ago(s.Last)))
		}
		if v.Predecessor.IsValid() {
			notes = append(notes, "handed over by "+v.Predecessor.String())
		}
		if v.State == vrrp.StateMaster.String() {
			// The routers whose connections the handback passes on.
			for _, h := range v.Holders {
				if h.Addr == v.Predecessor {
					continue
				}
				n := "held before by " + h.Addr.String() + " (last advert " + p.ago(h.Last)
				if !h.Alive {
					n += ", went silent"
				}
				notes = append(notes, n+")")
			}
		}
		for _, t := range v.Tracks {
			if !t.Healthy {
				n := "track " + t.Name + " failing"
				if t.Err != "" {
					n += ": " + t.Err
				}
				notes = append(notes, n)
			}
		}
		row(tw, v.Name, joinText(v.VIPs), strconv.Itoa(int(v.VRID)), v.State, strconv.Itoa(int(v.Priority)),
			addrText(v.Master), p.ago(v.Since), transportText(v), strings.Join(notes, "; "))
	}
	tw.Flush()
}

// transportText is how a router's adverts travel: "multicast", or
// "unicast to" its peers.
func transportText(v vrrp.Status) string {
	switch {
	case v.Transport == vrrp.TransportUnicast && len(v.Peers) == 0:
		return "unicast, no peer yet"
	case v.Transport == vrrp.TransportUnicast:
		return "unicast to " + joinText(v.Peers)
	case v.Transport == "":
		return "-"
	}
	return v.Transport
}

func (p *statusPrinter) lb(raw json.RawMessage) {
	var st lb.Status
	if !p.decodeSection("LB", raw, &st) {
		return
	}
	p.title("LB")
	pools := make([]string, 0, len(st.Pools))
	for name := range st.Pools {
		pools = append(pools, name)
	}
	slices.Sort(pools)
	if len(pools) == 0 {
		p.out.WriteString("no pool\n")
	} else {
		tw := p.table("POOL", "BACKEND", "FAMILY", "ADDRESS", "STATE", "BACKUP", "ACTIVE", "WEIGHT")
		for _, name := range pools {
			if len(st.Pools[name]) == 0 {
				row(tw, name, "(no backend)", "", "", "", "", "", "")
			}
			for _, b := range st.Pools[name] {
				row(tw, name, b.Name, b.Family, b.Addr, b.State, yesNo(b.Backup), strconv.Itoa(b.Active), strconv.Itoa(b.Weight))
			}
		}
		tw.Flush()
	}
	if len(st.Redirect) == 0 {
		p.out.WriteString("redirect: none installed\n")
	} else {
		fmt.Fprintf(&p.out, "redirect: %s\n", strings.Join(st.Redirect, ", "))
	}
	if r := st.LastRepair; r != nil {
		fmt.Fprintf(&p.out, "last redirect repair: %s (%s, %s): found %s; %s\n", p.ago(r.Time), r.Kind, r.Trigger, r.Found, r.Action)
	}
	if len(st.Handback) > 0 {
		fmt.Fprintf(&p.out, "connections this node does not know go back to: %s\n", strings.Join(st.Handback, ", "))
	}
}

func (p *statusPrinter) dns(raw json.RawMessage) {
	var st dnsserver.Status
	if !p.decodeSection("DNS", raw, &st) {
		return
	}
	p.title("DNS")
	// UPSTREAMS are tried in their order, the next only when one fails.
	tw := p.table("ZONE", "LISTEN", "SERVING", "UPSTREAMS")
	row(tw, st.Zone, st.Listen, yesNo(st.Serving), joinText(st.Upstreams))
	tw.Flush()
	p.title("DNS CLIENTS")
	tw = p.table("ANSWERED", "FROM")
	for _, c := range st.Clients {
		row(tw, c.Prefix.String(), c.Source)
	}
	tw.Flush()
	p.out.WriteString("other clients: REFUSED\n")
	m := st.MDNS
	if m == nil {
		return
	}
	p.title("MDNS")
	tw = p.table("INTERFACE", "NODE", "ADDRESSES", "SOCKETS", "MDNS-ONLY MEMBERS", "PROBLEM")
	row(tw, m.Interface, m.Node, joinText(m.Addrs), strings.Join(m.Sockets, ","), strings.Join(m.Members, ","), m.Problem)
	tw.Flush()
	if len(m.RefusedClaims) == 0 {
		return
	}
	p.title("MDNS REFUSED CLAIMS")
	tw = p.table("FROM", "NODE", "ADDRESSES", "REASON", "COUNT", "LAST", "DETAIL")
	for _, c := range m.RefusedClaims {
		row(tw, addrText(c.From), c.Node, joinText(c.Addrs), c.Reason, strconv.Itoa(c.Count), p.ago(c.Last), c.Detail)
	}
	tw.Flush()
}

func (p *statusPrinter) members(raw json.RawMessage) {
	var ms []cluster.Member
	if !p.decodeSection("MEMBERS", raw, &ms) {
		return
	}
	p.title("MEMBERS")
	if len(ms) == 0 {
		p.out.WriteString("no member known\n")
		return
	}
	tw := p.table("NAME", "ROLE", "ADDRESSES", "SOURCE", "HEALTHY", "LAST SEEN")
	for _, m := range ms {
		seen := p.ago(m.LastSeen)
		if seen == "" {
			seen = "never"
		}
		row(tw, m.Name, string(m.Role), joinText(m.IPs), string(m.Source), yesNo(m.Healthy), seen)
	}
	tw.Flush()
}

func (p *statusPrinter) dhcp(raw json.RawMessage) {
	var st dhcp.Status
	if !p.decodeSection("DHCP", raw, &st) {
		return
	}
	p.title("DHCP")
	served := "no pool"
	if st.Pool != "" {
		served = "off (another node serves it)"
		if st.ServingPool {
			served = "on"
		}
	}
	tw := p.table("INTERFACE", "SERVER", "POOL", "POOL HERE", "LEASE TIME", "RESERVATIONS")
	row(tw, st.Interface, addrText(st.ServerID), st.Pool, served, st.LeaseTime, strconv.Itoa(st.Reservations))
	tw.Flush()

	p.title("DHCP LEASES")
	if len(st.Leases) == 0 {
		p.out.WriteString("no lease\n")
	} else {
		tw = p.table("MAC", "ADDRESS", "HOST NAME", "EXPIRES", "NOTES")
		for _, l := range st.Leases {
			note := ""
			if l.Declined {
				note = "declined: in use by an unknown host"
			}
			row(tw, l.MACText, addrText(l.IP), l.Hostname, p.ago(l.Expiry), note)
		}
		tw.Flush()
	}
	if len(st.Reserved) == 0 {
		return
	}
	p.title("DHCP RESERVATIONS")
	tw = p.table("MAC", "ADDRESS", "HOST NAME", "LAST ACK")
	for _, r := range st.Reserved {
		ack := "never"
		if r.LastAck != nil {
			ack = p.ago(*r.LastAck)
		}
		row(tw, r.MAC, addrText(r.IP), r.Hostname, ack)
	}
	tw.Flush()
}

// addrText is a's text, "" for the zero address (whose String is "invalid IP").
func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
