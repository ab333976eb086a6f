package dhcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// leaseFileVersion is the format of the lease file.
const leaseFileVersion = 1

type leaseFile struct {
	Version int     `json:"version"`
	Leases  []Lease `json:"leases"`
}

// Store holds the leases: pool leases and declined addresses, plus in-memory
// offers. Changes are applied in memory at once (so concurrent decisions see
// them) and made durable by one flusher that rewrites the whole file (temp
// file, fsync, rename, fsync of the directory) for all changes pending at
// that moment: a group commit, so a burst of ACKs costs one fsync, not one
// each. Reservations are not stored: they need no memory.
type Store struct {
	path string

	mu       sync.Mutex
	byIP     map[netip.Addr]*Lease
	byMAC    map[string]*Lease
	gen      uint64 // bumped by every change that must reach the file
	durable  uint64 // highest gen on disk
	flushErr error
	cond     *sync.Cond
	kick     chan struct{}
}

// OpenStore loads the lease file at path ("" keeps leases in memory only).
// A missing file is an empty store; an unreadable one is an error naming it,
// since starting empty could hand a leased address to a second client.
func OpenStore(path string) (*Store, error) {
	s := &Store{
		path:  path,
		byIP:  map[netip.Addr]*Lease{},
		byMAC: map[string]*Lease{},
		kick:  make(chan struct{}, 1),
	}
	s.cond = sync.NewCond(&s.mu)
	if path == "" {
		return s, nil
	}
	// Temp files of writes a crash interrupted; the lease file itself is
	// always complete (see writeFileAtomic).
	if stale, _ := filepath.Glob(path + ".tmp*"); len(stale) > 0 {
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dhcp: read lease file: %w", err)
	}
	leases, err := parseLeaseFile(data, path)
	if err != nil {
		return nil, err
	}
	for _, l := range leases {
		s.putLocked(l)
	}
	return s, nil
}

// parseLeaseFile decodes and checks a lease file's content.
func parseLeaseFile(data []byte, path string) ([]Lease, error) {
	var f leaseFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("dhcp: lease file %s is corrupt (move it aside to start empty): %w", path, err)
	}
	if f.Version != leaseFileVersion {
		return nil, fmt.Errorf("dhcp: lease file %s has version %d, want %d", path, f.Version, leaseFileVersion)
	}
	for i, l := range f.Leases {
		if !l.IP.Is4() {
			return nil, fmt.Errorf("dhcp: lease file %s: lease address %v is not IPv4", path, l.IP)
		}
		if !l.Declined {
			mac, err := net.ParseMAC(l.MACText)
			if err != nil || len(mac) != 6 {
				return nil, fmt.Errorf("dhcp: lease file %s: lease %v: bad MAC %q", path, l.IP, l.MACText)
			}
			f.Leases[i].MAC = mac
		}
	}
	return f.Leases, nil
}

// ByMAC returns the lease or offer held by mac.
func (s *Store) ByMAC(mac net.HardwareAddr) (Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return lockedView{s}.ByMAC(mac)
}

// ByIP returns the lease, offer or decline on ip.
func (s *Store) ByIP(ip netip.Addr) (Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return lockedView{s}.ByIP(ip)
}

// lockedView is the LeaseView Update hands to decisions, with s.mu held.
type lockedView struct{ s *Store }

func (v lockedView) ByMAC(mac net.HardwareAddr) (Lease, bool) {
	l, ok := v.s.byMAC[string(mac)]
	if !ok {
		return Lease{}, false
	}
	return *l, true
}

func (v lockedView) ByIP(ip netip.Addr) (Lease, bool) {
	l, ok := v.s.byIP[ip]
	if !ok {
		return Lease{}, false
	}
	return *l, true
}

// Update runs decide with the store locked, so the decision and its change
// are atomic with respect to other requests, and applies the change. It
// returns the generation to pass to WaitDurable (0 when nothing needs to
// reach the disk).
func (s *Store) Update(decide func(LeaseView) Decision) (Decision, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := decide(lockedView{s})
	return d, s.applyLocked(d.Change)
}

// Apply applies one change outside a decision (e.g. an ARP probe conflict).
func (s *Store) Apply(c Change) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(c)
}

func (s *Store) applyLocked(c Change) uint64 {
	switch c.Kind {
	case ChangeNone:
		return 0
	case ChangeOffer:
		if cur, ok := s.byIP[c.IP]; ok && !macEqual(cur.MAC, c.MAC) && cur.Expiry.After(time.Now()) {
			return 0 // never let an offer shadow a real lease
		}
		if cur, ok := s.byMAC[string(c.MAC)]; ok && !cur.Offered {
			return 0 // the client holds a lease; the offer renews it later
		}
		s.putLocked(Lease{IP: c.IP, MAC: c.MAC, Expiry: c.Expiry, Offered: true})
		return 0
	case ChangeBind:
		s.putLocked(Lease{IP: c.IP, MAC: c.MAC, Hostname: c.Hostname, Expiry: c.Expiry})
	case ChangeRelease:
		l, ok := s.byIP[c.IP]
		if !ok || !macEqual(l.MAC, c.MAC) {
			return 0
		}
		s.deleteLocked(l)
		if l.Offered {
			return 0
		}
	case ChangeDecline:
		s.putLocked(Lease{IP: c.IP, Expiry: c.Expiry, Declined: true})
	}
	s.gen++
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return s.gen
}

// putLocked stores l, replacing whatever held its address and whatever
// address its MAC held before.
func (s *Store) putLocked(l Lease) {
	if old, ok := s.byIP[l.IP]; ok {
		s.deleteLocked(old)
	}
	if !l.Declined {
		if old, ok := s.byMAC[string(l.MAC)]; ok {
			s.deleteLocked(old)
		}
		l.MACText = l.MAC.String()
	}
	p := &l
	s.byIP[l.IP] = p
	if !l.Declined {
		s.byMAC[string(l.MAC)] = p
	}
}

func (s *Store) deleteLocked(l *Lease) {
	if s.byIP[l.IP] == l {
		delete(s.byIP, l.IP)
	}
	if !l.Declined && s.byMAC[string(l.MAC)] == l {
		delete(s.byMAC, string(l.MAC))
	}
}

// Expire removes leases and offers that ended before now, returning how
// many leases (not offers) it removed. Expired leases are already free to
// Decide; this only keeps the table and the file small.
func (s *Store) Expire(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.byIP {
		if l.Expiry.After(now) {
			continue
		}
		s.deleteLocked(l)
		if !l.Offered {
			n++
		}
	}
	if n > 0 {
		s.gen++
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return n
}

// Leases returns a copy of the stored leases (offers excluded), by address.
func (s *Store) Leases() []Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

// Held returns every entry that holds an address, offers included (each
// address once: the store keys them by address).
func (s *Store) Held() []Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Lease, 0, len(s.byIP))
	for _, l := range s.byIP {
		out = append(out, *l)
	}
	return out
}

func (s *Store) snapshotLocked() []Lease {
	out := make([]Lease, 0, len(s.byIP))
	for _, l := range s.byIP {
		if !l.Offered {
			out = append(out, *l)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return a.IP.Compare(b.IP) })
	return out
}

// WaitDurable blocks until generation gen is on disk, the flusher failed, or
// ctx ends.
func (s *Store) WaitDurable(ctx context.Context, gen uint64) error {
	if gen == 0 || s.path == "" {
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.durable < gen {
		if s.flushErr != nil {
			return s.flushErr
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		s.cond.Wait()
	}
	return nil
}

// Run flushes changes to the lease file until ctx ends, then once more.
func (s *Store) Run(ctx context.Context) error {
	if s.path == "" {
		<-ctx.Done()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return s.Flush()
		case <-s.kick:
			_ = s.Flush() // the error reaches waiters via flushErr
		}
	}
}

// Flush writes the current leases to the file if anything changed since the
// last write.
func (s *Store) Flush() error {
	s.mu.Lock()
	gen := s.gen
	if gen == s.durable {
		s.mu.Unlock()
		return nil
	}
	leases := s.snapshotLocked()
	s.mu.Unlock()

	err := writeFileAtomic(s.path, leaseFile{Version: leaseFileVersion, Leases: leases})

	s.mu.Lock()
	if err == nil {
		s.durable = max(s.durable, gen)
		s.flushErr = nil
	} else {
		s.flushErr = err
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	return err
}

// writeFileAtomic replaces path so that a crash at any moment leaves either
// the old or the new content, both complete.
func writeFileAtomic(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("dhcp: encode leases: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dhcp: lease directory: %w", err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("dhcp: write leases: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("dhcp: write leases to %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("dhcp: sync lease directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("dhcp: sync lease directory %s: %w", dir, err)
	}
	return nil
}
