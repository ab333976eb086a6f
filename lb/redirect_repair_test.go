package lb

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

func TestPlanRedirect(t *testing.T) {
	want := map[string][]string{"prerouting": {"a", "b"}, "output": {"c", "d"}}
	ours := func(rules ...string) foundChain { return foundChain{Ours: true, Rules: rules} }
	intact := func() foundTable {
		return foundTable{Exists: true, Chains: map[string]foundChain{"prerouting": ours("a", "b"), "output": ours("c", "d")}}
	}
	with := func(edit func(f *foundTable)) foundTable {
		f := intact()
		edit(&f)
		return f
	}
	for _, tt := range []struct {
		name      string
		want      map[string][]string
		found     foundTable
		kind      string
		wantFound string
	}{
		{"as desired", want, intact(), "", ""},
		{"rules in another order", want, with(func(f *foundTable) { f.Chains["prerouting"] = ours("b", "a") }), "", ""},
		{"no table wanted, none there", nil, foundTable{}, "", ""},
		{"no table wanted, one there: removed on purpose, someone re-made it", nil, intact(), "", ""},
		{"no table wanted, half a table there", map[string][]string{}, with(func(f *foundTable) { delete(f.Chains, "output") }), "", ""},
		{"table deleted (or flush ruleset)", want, foundTable{}, RepairTable, "table inet t deleted by someone else"},
		{"one chain deleted", want, with(func(f *foundTable) { delete(f.Chains, "prerouting") }), RepairChain,
			"table inet t: chain prerouting deleted by someone else"},
		{"both chains deleted", want, foundTable{Exists: true}, RepairChain,
			"table inet t: chains output, prerouting deleted by someone else"},
		{"chain re-created as a regular chain", want, with(func(f *foundTable) { f.Chains["output"] = foundChain{Rules: []string{"c", "d"}} }), RepairChain,
			"table inet t: chain output re-created with another type, hook or priority"},
		{"foreign chain", want, with(func(f *foundTable) { f.Chains["x"] = foundChain{} }), RepairChain,
			"table inet t: foreign chain x added"},
		{"chain flushed", want, with(func(f *foundTable) { f.Chains["output"] = ours() }), RepairRule,
			"table inet t: 2 of 4 rules missing"},
		{"one rule deleted", want, with(func(f *foundTable) { f.Chains["prerouting"] = ours("b") }), RepairRule,
			"table inet t: 1 of 4 rules missing"},
		{"foreign rule", want, with(func(f *foundTable) { f.Chains["prerouting"] = ours("a", "b", "z") }), RepairRule,
			"table inet t: 1 foreign rule"},
		{"duplicate rule", want, with(func(f *foundTable) { f.Chains["prerouting"] = ours("a", "b", "a") }), RepairRule,
			"table inet t: 1 foreign rule"},
		{"rule replaced", want, with(func(f *foundTable) { f.Chains["output"] = ours("c", "z") }), RepairRule,
			"table inet t: 1 of 4 rules missing, 1 foreign rule"},
		{"rule moved to the other chain", want, with(func(f *foundTable) { f.Chains["output"] = ours("c", "d", "a"); f.Chains["prerouting"] = ours("b") }), RepairRule,
			"table inet t: 1 of 4 rules missing, 1 foreign rule"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := planRedirect("t", tt.want, tt.found)
			if p.Kind != tt.kind || p.Found != tt.wantFound {
				t.Errorf("plan = %+v, want kind %q found %q", p, tt.kind, tt.wantFound)
			}
		})
	}
}

func TestWantChains(t *testing.T) {
	if w := wantChains(nil); w != nil {
		t.Errorf("no rules: %v, want nil (no table)", w)
	}
	rd := Redirect{VIP: netip.MustParseAddr("192.0.2.1"), Port: 6443, ToPort: 9445}
	w := wantChains([]Redirect{rd, {VIP: netip.MustParseAddr("2001:db8::1"), Port: 6443, ToPort: 9445}})
	if len(w) != 2 || len(w[chainPrerouting]) != 2 || len(w[chainOutput]) != 2 {
		t.Fatalf("chains %v", w)
	}
	if w[chainPrerouting][0] == w[chainOutput][0] {
		t.Error("the output rule (oifname lo) has the same key as the prerouting one")
	}
	// Counters' values do not change a rule's key: traffic is no change.
	e := redirectExprs(rd, false)
	for _, x := range e {
		if c, ok := x.(*expr.Counter); ok {
			c.Packets, c.Bytes = 7, 700
		}
	}
	if ruleKey(e) != w[chainPrerouting][0] {
		t.Error("a counted rule differs from the desired one")
	}
	// The kernel reports our redirect as a one-port range, flagged so.
	for i, x := range e {
		if _, ok := x.(*expr.Redir); ok {
			e[i] = &expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED}
		}
	}
	if ruleKey(e) != w[chainPrerouting][0] {
		t.Error("the redirect as read back differs from the desired one")
	}
}

func TestTouchesTable(t *testing.T) {
	ours := &nftables.Table{Name: "appliance_lb", Family: nftables.TableFamilyINet}
	other := &nftables.Table{Name: "filter", Family: nftables.TableFamilyINet}
	ip := &nftables.Table{Name: "appliance_lb", Family: nftables.TableFamilyIPv4}
	ev := func(typ nftables.MonitorEventType, data any) *nftables.MonitorEvent {
		return &nftables.MonitorEvent{Type: typ, Data: data}
	}
	for _, tt := range []struct {
		name    string
		changes []*nftables.MonitorEvent
		want    bool
	}{
		{"nothing", nil, false},
		{"our table deleted", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelTable, ours)}, true},
		{"our chain deleted", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelChain, &nftables.Chain{Name: "output", Table: ours})}, true},
		{"our rule deleted", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelRule, &nftables.Rule{Table: ours})}, true},
		{"flush ruleset: others first, then ours", []*nftables.MonitorEvent{
			ev(nftables.MonitorEventTypeDelRule, &nftables.Rule{Table: other}),
			ev(nftables.MonitorEventTypeDelTable, other),
			ev(nftables.MonitorEventTypeDelTable, ours),
		}, true},
		{"another table", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelTable, other)}, false},
		{"same name, another family", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelTable, ip)}, false},
		{"undecodable change", []*nftables.MonitorEvent{{Type: nftables.MonitorEventTypeDelRule, Error: errTest}}, true},
	} {
		if got := touchesTable("appliance_lb", tt.changes); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestTouchesHandback: the changes that make the LB write its handback
// tables again at once (someone else's nft flush ruleset, a rule or chain
// of theirs deleted) are those to the ip and ip6 tables of that name.
func TestTouchesHandback(t *testing.T) {
	ip := &nftables.Table{Name: HandbackTable, Family: nftables.TableFamilyIPv4}
	ip6 := &nftables.Table{Name: HandbackTable, Family: nftables.TableFamilyIPv6}
	inet := &nftables.Table{Name: HandbackTable, Family: nftables.TableFamilyINet}
	redirect := &nftables.Table{Name: DefaultTable, Family: nftables.TableFamilyINet}
	ev := func(typ nftables.MonitorEventType, data any) *nftables.MonitorEvent {
		return &nftables.MonitorEvent{Type: typ, Data: data}
	}
	for _, tt := range []struct {
		name    string
		changes []*nftables.MonitorEvent
		want    bool
	}{
		{"nothing", nil, false},
		{"the ip table deleted", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelTable, ip)}, true},
		{"the ip6 chain deleted", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelChain, &nftables.Chain{Name: chainPrerouting, Table: ip6})}, true},
		{"a rule deleted", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelRule, &nftables.Rule{Table: ip})}, true},
		{"flush ruleset: the redirect first, then the handback", []*nftables.MonitorEvent{
			ev(nftables.MonitorEventTypeDelTable, redirect),
			ev(nftables.MonitorEventTypeDelTable, ip),
		}, true},
		{"the redirect table alone", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelTable, redirect)}, false},
		{"same name, inet", []*nftables.MonitorEvent{ev(nftables.MonitorEventTypeDelTable, inet)}, false},
		{"undecodable change", []*nftables.MonitorEvent{{Type: nftables.MonitorEventTypeDelRule, Error: errTest}}, true},
	} {
		if got := touchesHandback(tt.changes); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

var errTest = testError("undecodable")

type testError string

func (e testError) Error() string { return string(e) }

// lockedBuffer collects log lines from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWatchMonitorFailures: a monitor that cannot be opened, that reports
// an overrun, or whose reader stops is logged and re-opened, each one
// closed exactly once, and Watch returns only when ctx ends, with every
// monitor closed.
func TestWatchMonitorFailures(t *testing.T) {
	r, err := NewRedirector("", "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var (
		mu     sync.Mutex
		opened int
		closed []int
	)
	healthy := make(chan struct{})
	fake := func(n int, events chan *nftables.MonitorEvents) *monitor {
		return &monitor{events: events, close: func() {
			mu.Lock()
			closed = append(closed, n)
			mu.Unlock()
		}}
	}
	open := func() (*monitor, error) {
		mu.Lock()
		defer mu.Unlock()
		opened++
		switch opened {
		case 1:
			return nil, errors.New("netlink: permission denied")
		case 2: // the socket overran: the library reports it, then closes
			ch := make(chan *nftables.MonitorEvents, 1)
			oob := &nftables.MonitorEvent{Type: nftables.MonitorEventTypeOOB, Error: unix.ENOBUFS}
			ch <- &nftables.MonitorEvents{GeneratedBy: oob, Changes: []*nftables.MonitorEvent{oob}}
			close(ch)
			return fake(2, ch), nil
		case 3: // the reader ended without a word
			ch := make(chan *nftables.MonitorEvents)
			close(ch)
			return fake(3, ch), nil
		default:
			if opened == 4 {
				close(healthy)
			}
			return fake(opened, make(chan *nftables.MonitorEvents)), nil
		}
	}
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Watch(ctx, WatchOptions{
			MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
			Log:         slog.New(slog.NewTextHandler(&logs, nil)),
			openMonitor: open,
		})
	}()
	select {
	case <-healthy:
	case <-time.After(5 * time.Second):
		t.Fatal("the monitor was not re-opened after its failures")
	}
	select {
	case err := <-done:
		t.Fatalf("Watch returned before ctx ended: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if opened != 4 || !slices.Equal(closed, []int{2, 3, 4}) {
		t.Errorf("opened %d monitors, closed %v; want 4, closed [2 3 4]", opened, closed)
	}
	out := logs.String()
	for _, want := range []string{"permission denied", "no buffer space available", "monitor stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "nftables monitor failed"); n != 3 {
		t.Errorf("%d failure lines, want 3:\n%s", n, out)
	}
}
