package exepages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Region is one mapping of the binary that Release may drop.
type Region struct {
	Start, End uintptr
	Perms      string
	RSS        int64 // bytes mapped when read
}

// Release drops the mappings of the binary's read-only pages (see the
// package comment) and returns how many bytes were mapped before.
func Release() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("exepages: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("exepages: %w", err)
	}
	var released int64
	for _, r := range Droppable(smaps, exe) {
		// MADV_DONTNEED on a private file mapping only removes its page
		// table entries; the next access maps the file's page again.
		if err := madvise(r, unix.MADV_DONTNEED); err != nil {
			return released, err
		}
		// The runtime reads the read-only data (function tables for stack
		// scans and tracebacks, type data for the GC) a few bytes at a time,
		// all over it. Without this advice each of those faults maps the
		// page-cache folio around it: one GC cycle after a release mapped
		// 12.6 MiB of the 27 MiB function table, 4.1 MiB with it. Text is
		// left to fault-around: code is read in runs.
		if r.Perms[2] != 'x' {
			if err := madvise(r, unix.MADV_RANDOM); err != nil {
				return released, err
			}
		}
		released += r.RSS
	}
	return released, nil
}

func madvise(r Region, advice int) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, r.Start, r.End-r.Start, uintptr(advice)); e != 0 {
		return fmt.Errorf("exepages: madvise(%d) %#x-%#x: %w", advice, r.Start, r.End, e)
	}
	return nil
}

// Droppable returns the mappings in smaps (the text of /proc/PID/smaps) of
// the file named exe (as /proc/PID/exe reads) that are private, not
// writable and hold no anonymous page: text and read-only data as loaded
// from the file. A mapping made read-only after the loader or the process
// wrote to it (relocations) has anonymous pages and is left alone.
func Droppable(smaps []byte, exe string) []Region {
	var out []Region
	var cur *Region
	anon := int64(-1)
	flush := func() {
		if cur != nil && anon == 0 {
			out = append(out, *cur)
		}
		cur, anon = nil, -1
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if key, val, ok := field(line); ok {
			if cur == nil {
				continue
			}
			switch key {
			case "Rss":
				cur.RSS = val
			case "Anonymous":
				anon = val
			}
			continue
		}
		flush()
		if r, ok := header(line, exe); ok {
			cur = &r
		}
	}
	flush()
	return out
}

// field parses "Key:   123 kB" (bytes returned); other key lines (VmFlags)
// are fields with no value.
func field(line string) (string, int64, bool) {
	key, rest, ok := strings.Cut(line, ":")
	if !ok || strings.ContainsAny(key, " -") {
		return "", 0, false
	}
	f := strings.Fields(rest)
	if len(f) == 2 && f[1] == "kB" {
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			return key, v << 10, true
		}
	}
	return key, -1, true
}

// header parses a mapping's first line, "start-end perms offset dev inode
// path", and keeps it if it maps exe read-only and private.
func header(line, exe string) (Region, bool) {
	// Five fields, then the path: the rest of the line, spaces and all.
	var f [5]string
	rest := line
	for i := range f {
		rest = strings.TrimLeft(rest, " ")
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, " "); !ok {
			return Region{}, false
		}
	}
	if path := strings.TrimLeft(rest, " "); path != exe {
		return Region{}, false
	}
	perms := f[1]
	if len(perms) != 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
		return Region{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return Region{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return Region{}, false
	}
	return Region{Start: uintptr(start), End: uintptr(end), Perms: perms}, true
}
