package lb

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Kinds of repair, the label of appliance_lb_redirect_repairs_total.
const (
	RepairTable = "table" // the table was gone
	RepairChain = "chain" // a chain was gone, changed, or one was added
	RepairRule  = "rule"  // rules were missing or foreign ones were added
)

// RedirectRepair describes one repair of the redirect table.
type RedirectRepair struct {
	Time time.Time `json:"time"`
	// Kind is RepairTable, RepairChain or RepairRule.
	Kind string `json:"kind"`
	// Found says what differed from the desired table.
	Found string `json:"found"`
	// Action says what was done about it.
	Action string `json:"action"`
	// Trigger is what led to the check: a monitor event or the periodic
	// check.
	Trigger string `json:"trigger"`
}

// foundTable is the redirect table as read back from the kernel.
type foundTable struct {
	Exists bool
	Chains map[string]foundChain
}

// foundChain is one chain of the table: whether it is the base chain we
// create (type, hook and priority), and its rules as ruleKey strings.
type foundChain struct {
	Ours  bool
	Rules []string
}

// repairPlan is planRedirect's verdict: Kind "" means the table is as
// desired.
type repairPlan struct {
	Kind  string
	Found string
}

// wantChains is the desired content of each chain, as ruleKey strings; nil
// for no rules, which means no table.
func wantChains(rules []Redirect) map[string][]string {
	if len(rules) == 0 {
		return nil
	}
	w := map[string][]string{}
	for _, rd := range rules {
		w[chainPrerouting] = append(w[chainPrerouting], ruleKey(redirectExprs(rd, false)))
		w[chainOutput] = append(w[chainOutput], ruleKey(redirectExprs(rd, true)))
	}
	return w
}

// planRedirect decides, from the desired chains (want, nil when no table is
// wanted) and what the kernel holds, whether the table needs a repair and
// says what was found. The most fundamental difference names the kind: a
// missing table, then chains, then rules. A table that is not wanted is
// never a repair, whatever exists: it was removed on purpose.
func planRedirect(table string, want map[string][]string, f foundTable) repairPlan {
	if len(want) == 0 {
		return repairPlan{}
	}
	if !f.Exists {
		return repairPlan{Kind: RepairTable, Found: fmt.Sprintf("table inet %s deleted by someone else", table)}
	}
	var missing, changed, extra []string
	for _, name := range sortedKeys(want) {
		c, ok := f.Chains[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case !c.Ours:
			changed = append(changed, name)
		}
	}
	for _, name := range sortedKeys(f.Chains) {
		if _, ok := want[name]; !ok {
			extra = append(extra, name)
		}
	}
	if len(missing)+len(changed)+len(extra) > 0 {
		var parts []string
		if len(missing) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s deleted by someone else", chainWord(len(missing)), strings.Join(missing, ", ")))
		}
		if len(changed) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s re-created with another type, hook or priority", chainWord(len(changed)), strings.Join(changed, ", ")))
		}
		if len(extra) > 0 {
			parts = append(parts, fmt.Sprintf("foreign %s %s added", chainWord(len(extra)), strings.Join(extra, ", ")))
		}
		return repairPlan{Kind: RepairChain, Found: fmt.Sprintf("table inet %s: %s", table, strings.Join(parts, "; "))}
	}
	total, miss, foreign := 0, 0, 0
	for name, keys := range want {
		total += len(keys)
		m, x := diffMultiset(keys, f.Chains[name].Rules)
		miss += m
		foreign += x
	}
	if miss+foreign == 0 {
		return repairPlan{}
	}
	var parts []string
	if miss > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d rules missing", miss, total))
	}
	if foreign > 0 {
		parts = append(parts, fmt.Sprintf("%d foreign %s", foreign, plural(foreign, "rule", "rules")))
	}
	return repairPlan{Kind: RepairRule, Found: fmt.Sprintf("table inet %s: %s", table, strings.Join(parts, ", "))}
}

// diffMultiset counts the wanted entries absent from got and the entries of
// got beyond what is wanted (a duplicate counts as one too many).
func diffMultiset(want, got []string) (missing, extra int) {
	left := map[string]int{}
	for _, k := range want {
		left[k]++
	}
	for _, k := range got {
		if left[k] > 0 {
			left[k]--
		} else {
			extra++
		}
	}
	for _, n := range left {
		missing += n
	}
	return missing, extra
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func chainWord(n int) string { return plural(n, "chain", "chains") }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ruleKey renders a rule's expressions for comparison, leaving out the
// counters' values, which change with traffic, and writing a redirect as
// the kernel reports it back (a port range of one, flagged as specified).
func ruleKey(exprs []expr.Any) string {
	var b strings.Builder
	for _, e := range exprs {
		switch x := e.(type) {
		case *expr.Counter:
			b.WriteString("counter;")
			continue
		case *expr.Redir:
			n := *x
			if n.RegisterProtoMin != 0 {
				if n.RegisterProtoMax == 0 {
					n.RegisterProtoMax = n.RegisterProtoMin
				}
				n.Flags |= unix.NF_NAT_RANGE_PROTO_SPECIFIED
			}
			e = &n
		}
		fmt.Fprintf(&b, "%T%+v;", e, e)
	}
	return b.String()
}

// chainIsOurs: the chain has the type, hook and priority chainSpec gives it.
func chainIsOurs(c *nftables.Chain) bool {
	w := chainSpec(c.Table, c.Name)
	return c.Type == w.Type &&
		c.Hooknum != nil && *c.Hooknum == *w.Hooknum &&
		c.Priority != nil && *c.Priority == *w.Priority
}

func notExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT)
}

// read returns what the kernel holds in the table. A table or chain that
// vanishes while it is read is read again, a few times.
func (r *Redirector) read() (foundTable, error) {
	var err error
	for range 3 {
		var f foundTable
		if f, err = r.readOnce(); err == nil || !notExist(err) {
			return f, err
		}
	}
	return foundTable{}, err
}

func (r *Redirector) readOnce() (foundTable, error) {
	c, err := r.conn()
	if err != nil {
		return foundTable{}, err
	}
	t, err := c.ListTableOfFamily(r.table, nftables.TableFamilyINet)
	if err != nil {
		if notExist(err) {
			return foundTable{}, nil
		}
		return foundTable{}, fmt.Errorf("lb: look up table %s: %w", r.table, err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return foundTable{}, fmt.Errorf("lb: list chains: %w", err)
	}
	f := foundTable{Exists: true, Chains: map[string]foundChain{}}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != r.table {
			continue
		}
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return foundTable{}, fmt.Errorf("lb: list rules of chain %s: %w", ch.Name, err)
		}
		fc := foundChain{Ours: chainIsOurs(ch)}
		for _, ru := range rules {
			fc.Rules = append(fc.Rules, ruleKey(ru.Exprs))
		}
		f.Chains[ch.Name] = fc
	}
	return f, nil
}

// Check compares the table with the rules last applied and, if someone
// else changed it, installs them again. It returns the repair made, or nil
// when the table was as desired. With no rules applied (never, or removed
// on purpose) it reads nothing and does nothing. It holds the lock Apply
// holds, so it never sees our own change half made.
func (r *Redirector) Check(trigger string) (*RedirectRepair, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.current) == 0 {
		return nil, nil
	}
	f, err := r.read()
	if err != nil {
		return nil, err
	}
	p := planRedirect(r.table, wantChains(r.current), f)
	if p.Kind == "" {
		return nil, nil
	}
	rep := &RedirectRepair{
		Time: time.Now(), Kind: p.Kind, Found: p.Found, Trigger: trigger,
		Action: fmt.Sprintf("replaced table inet %s with its %d desired rules", r.table, 2*len(r.current)),
	}
	if err := r.install(r.current); err != nil {
		rep.Action = "re-install failed"
		return rep, err
	}
	return rep, nil
}
