package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// staleRE matches the names of lab namespaces and log directories and
// captures the creator's pid.
var staleRE = regexp.MustCompile(`^apl([0-9]+)-[0-9a-f]{4}-`)

// stalePID returns the creator pid encoded in a lab name if that process no
// longer exists.
func stalePID(name string) (int, bool) {
	m := staleRE.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return 0, false
	}
	return pid, !pidAlive(pid)
}

// Sweep deletes lab namespaces (and log directories) whose creating process
// is gone, e.g. after a test binary was killed with SIGKILL, first killing
// any process still running inside them. New calls it; it is exported for
// `appliance lab` and CI scripts. It returns the namespace names it
// removed. Labs of live processes are never touched.
func Sweep() (removed []string, err error) {
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("netlab: sweep: %w", err)
	}
	var stale []string
	ids := map[nsID]bool{}
	for _, e := range ents {
		if _, dead := stalePID(e.Name()); !dead {
			continue
		}
		stale = append(stale, e.Name())
		if id, err := statNS(nsPath(e.Name())); err == nil {
			ids[id] = true
		}
	}
	var errs []error
	if len(stale) > 0 {
		// Orphans of a crashed run: no one is left to shut them down
		// gracefully.
		kill := func() bool {
			pids := procsIn(ids, nil)
			for _, pid := range pids {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			return len(pids) == 0
		}
		if !waitFor(kill, 5*time.Second) {
			errs = append(errs, fmt.Errorf("netlab: sweep: processes survive SIGKILL: %v", procsIn(ids, nil)))
		}
	}
	for _, name := range stale {
		if err := deleteNS(name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	if tmp, err := os.ReadDir(os.TempDir()); err == nil {
		for _, e := range tmp {
			if _, dead := stalePID(e.Name()); dead && e.IsDir() {
				if err := os.RemoveAll(filepath.Join(os.TempDir(), e.Name())); err != nil {
					errs = append(errs, fmt.Errorf("netlab: sweep: %w", err))
				}
			}
		}
	}
	return removed, errors.Join(errs...)
}
