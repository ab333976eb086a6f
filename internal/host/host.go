package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"appliance/internal/cluster"
)

// resync is the backstop: the links are listed again this often even when no
// event arrived, in case the kernel dropped some (a netlink socket overrun).
const resync = 30 * time.Second

// Host keeps the View of this node current. Create it with New (which binds
// nothing), then Run it; View and Subscribe are safe from any goroutine.
type Host struct {
	cfg      *cluster.Config
	opts     Options
	log      *slog.Logger
	netns    string
	hostname func() (string, error)

	view atomic.Pointer[View]

	mu    sync.Mutex
	subs  map[chan *View]struct{}
	ready chan struct{} // closed once the first view is published
}

// New prepares a Host for cfg. netnsPath names the network namespace to
// watch ("" is the process's own); tests pass a lab node's namespace.
func New(cfg *cluster.Config, opts Options, netnsPath string, log *slog.Logger) *Host {
	if log == nil {
		log = slog.Default()
	}
	return &Host{cfg: cfg, opts: opts, log: log.With("component", "host"), netns: netnsPath,
		hostname: os.Hostname, subs: map[chan *View]struct{}{}, ready: make(chan struct{})}
}

// Resolve lists the links once and identifies the node, without watching:
// for commands that only need to know where they run.
func Resolve(cfg *cluster.Config, opts Options) (*View, error) {
	return New(cfg, opts, "", slog.New(slog.DiscardHandler)).Resolve()
}

// Resolve lists the links once, identifies the node and publishes that
// first view (logging who the node is, and a --role that disagreed with the
// config), before Run: a command learns who and where the node is before it
// builds its services. Run then carries on from this view; who the node is
// stays as decided here.
func (h *Host) Resolve() (*View, error) {
	nl, closeNS, err := h.handle()
	if err != nil {
		return nil, err
	}
	defer closeNS()
	defer nl.Close()
	if err := h.refresh(nl); err != nil {
		return nil, err
	}
	return h.View(), nil
}

// ReadLinks lists this machine's links and their addresses once, in the
// caller's network namespace: the input of Who and Locate for a command
// that decides once (preflight).
func ReadLinks() ([]Link, error) {
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("host: netlink: %w", err)
	}
	defer nl.Close()
	return listLinks(nl)
}

// View returns the current view; nil before Run has listed the links once.
func (h *Host) View() *View { return h.view.Load() }

// Wait returns the first view once Run has published it, or ctx's error.
// Run's own failure to start shows as ctx ending (Run's errgroup cancels it).
func (h *Host) Wait(ctx context.Context) (*View, error) {
	select {
	case <-h.ready:
		return h.View(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Subscribe returns a channel that receives the current view (once there is
// one) and then every newer one. It holds at most one: a slow reader skips
// to the latest. The channel is closed once ctx ends.
func (h *Host) Subscribe(ctx context.Context) <-chan *View {
	ch := make(chan *View, 1)
	h.mu.Lock()
	if v := h.view.Load(); v != nil {
		ch <- v
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		close(ch)
		h.mu.Unlock()
	})
	return ch
}

// Run lists the links, publishes the first view and then follows every link
// and address change until ctx ends. It fails only when the first listing
// fails or the node cannot be identified; a subscription that breaks later is
// opened again (and the links listed again), with a WARN line.
func (h *Host) Run(ctx context.Context) error {
	nl, closeNS, err := h.handle()
	if err != nil {
		return err
	}
	defer closeNS()
	defer nl.Close()
	if err := h.refresh(nl); err != nil {
		return err
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := h.follow(ctx, nl)
		if ctx.Err() != nil {
			break
		}
		h.log.Warn("netlink subscription broke; subscribing again and listing the links anew", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
		if err := h.refresh(nl); err != nil {
			h.log.Warn("listing links failed", "err", err)
		}
	}
	return nil
}

// follow subscribes to link and address changes and re-lists on each burst
// of them, until ctx ends or a subscription fails.
func (h *Host) follow(ctx context.Context, nl *netlink.Handle) error {
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns, closeNS, err := h.nsHandle()
	if err != nil {
		return err
	}
	defer closeNS()
	failed := make(chan error, 2)
	onErr := func(err error) {
		if subCtx.Err() == nil {
			select {
			case failed <- err:
			default:
			}
		}
	}
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(links, subCtx.Done(), netlink.LinkSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
		return fmt.Errorf("host: subscribe to links: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, subCtx.Done(), netlink.AddrSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
		return fmt.Errorf("host: subscribe to addresses: %w", err)
	}
	// Anything that changed between the first listing and the subscription
	// would otherwise be missed.
	if err := h.refresh(nl); err != nil {
		h.log.Warn("listing links failed", "err", err)
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case _, ok := <-links:
			if !ok {
				return errors.New("link subscription closed")
			}
		case _, ok := <-addrs:
			if !ok {
				return errors.New("address subscription closed")
			}
		case <-tick.C:
		}
		// One listing for a whole burst (an interface created with its
		// addresses sends many events).
		drain(links, addrs)
		if err := h.refresh(nl); err != nil {
			h.log.Warn("listing links failed", "err", err)
		}
	}
}

func drain(links chan netlink.LinkUpdate, addrs chan netlink.AddrUpdate) {
	for {
		select {
		case <-links:
		case <-addrs:
		default:
			return
		}
	}
}

// refresh lists the links, identifies the node (the first time only: who
// the node is was decided at start; only where it is changes) and publishes
// the view if it changed.
func (h *Host) refresh(nl *netlink.Handle) error {
	links, err := listLinks(nl)
	if err != nil {
		return err
	}
	cur := h.view.Load()
	var v View
	if cur == nil {
		hostname, _ := h.hostname()
		if v, err = Identify(h.cfg, h.opts, hostname, links, ""); err != nil {
			return err
		}
	} else {
		v = Locate(h.cfg, h.opts, links, cur.Interface)
		v.setIdentity(cur.Identity())
	}
	h.publish(cur, &v)
	return nil
}

func (h *Host) publish(cur, next *View) {
	if cur.sameAs(next) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur != nil {
		next.Version = cur.Version + 1
	} else {
		next.Version = 1
	}
	h.view.Store(next)
	switch {
	case cur == nil:
		if next.Name == "" {
			h.log.Info("machine located; it is no configured node", "interface", next.Interface,
				"addrs", next.Prefixes, "problem", next.Problem)
		} else {
			h.log.Info("node identified", "node", next.Name, "role", next.Role, "by", next.By,
				"configured", next.Configured, "interface", next.Interface, "addrs", next.Prefixes, "problem", next.Problem)
		}
		if next.Warning != "" {
			h.log.Warn(next.Warning, "node", next.Name, "role", next.Role, "flag_role", h.opts.Role)
		}
		close(h.ready)
	case next.Problem != "" && next.Problem != cur.Problem:
		h.log.Warn("node's addresses changed", "interface", next.Interface, "addrs", next.Prefixes, "problem", next.Problem)
	default:
		h.log.Info("node's addresses changed", "interface", next.Interface, "addrs", next.Prefixes,
			"was_interface", cur.Interface, "was_addrs", cur.Prefixes)
	}
	for ch := range h.subs {
		select {
		case <-ch: // drop the unread older view
		default:
		}
		ch <- next // room guaranteed: h.mu makes this the only sender
	}
}

// handle opens a netlink handle in the watched namespace.
func (h *Host) handle() (*netlink.Handle, func(), error) {
	ns, closeNS, err := h.nsHandle()
	if err != nil {
		return nil, nil, err
	}
	var nl *netlink.Handle
	if ns == nil {
		nl, err = netlink.NewHandle()
	} else {
		nl, err = netlink.NewHandleAt(*ns)
	}
	if err != nil {
		closeNS()
		return nil, nil, fmt.Errorf("host: netlink: %w", err)
	}
	return nl, closeNS, nil
}

// nsHandle opens the watched namespace; nil means the caller's.
func (h *Host) nsHandle() (*netns.NsHandle, func(), error) {
	if h.netns == "" {
		return nil, func() {}, nil
	}
	ns, err := netns.GetFromPath(h.netns)
	if err != nil {
		return nil, nil, fmt.Errorf("host: open network namespace %s: %w", h.netns, err)
	}
	return &ns, func() { ns.Close() }, nil
}

// listLinks reads every link and its addresses.
func listLinks(nl *netlink.Handle) ([]Link, error) {
	ls, err := nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("host: list links: %w", err)
	}
	addrs, err := nl.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("host: list addresses: %w", err)
	}
	byIndex := map[int][]netip.Prefix{}
	for _, a := range addrs {
		if a.IPNet == nil || a.Flags&unix.IFA_F_DADFAILED != 0 {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		ones, _ := a.Mask.Size()
		if ip.Is4() && ones > 32 {
			ones -= 96
		}
		byIndex[a.LinkIndex] = append(byIndex[a.LinkIndex], netip.PrefixFrom(ip, ones))
	}
	out := make([]Link, 0, len(ls))
	for _, l := range ls {
		at := l.Attrs()
		up := at.Flags&net.FlagUp != 0 &&
			(at.OperState == netlink.OperUp || at.OperState == netlink.OperUnknown)
		out = append(out, Link{Name: at.Name, Index: at.Index, Up: up, MAC: at.HardwareAddr, Addrs: byIndex[at.Index]})
	}
	return out, nil
}
