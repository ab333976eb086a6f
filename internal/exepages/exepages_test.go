package exepages

import (
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const smaps = `00400000-01e2a000 r-xp 00000000 fd:00 1234 /usr/bin/appliance
Size:              27816 kB
Rss:               19200 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
01e2a000-04a0c000 r--p 01a2a000 fd:00 1234 /usr/bin/appliance
Size:              45960 kB
Rss:               20800 kB
Anonymous:             0 kB
VmFlags: rd mr mw me dw sd
04a0c000-04b2e000 rw-p 0460c000 fd:00 1234 /usr/bin/appliance
Size:               1160 kB
Rss:                 700 kB
Anonymous:           300 kB
04b2e000-04c00000 r--p 0472e000 fd:00 1234 /usr/bin/appliance
Size:                840 kB
Rss:                 840 kB
Anonymous:             4 kB
04c00000-04d00000 rw-p 00000000 00:00 0 
Size:               1024 kB
Rss:                1024 kB
Anonymous:          1024 kB
7f0000000000-7f0000100000 r--p 00000000 fd:00 99 /usr/lib/other.so
Size:               1024 kB
Rss:                 100 kB
Anonymous:             0 kB
7f0000100000-7f0000200000 r-xs 00000000 fd:00 1234 /usr/bin/appliance
Size:               1024 kB
Rss:                  12 kB
Anonymous:             0 kB
7f0000200000-7f0000300000 r-xp 00000000 fd:00 77 /opt/my dir/appliance (deleted)
Size:               1024 kB
Rss:                  64 kB
Anonymous:             0 kB
7f0000300000-7f0000400000 r-xp 00000000 fd:00 1234 /usr/bin/appliance
Size:               1024 kB
Rss:                  64 kB
`

func TestDroppable(t *testing.T) {
	for _, tc := range []struct {
		name, exe string
		want      []Region
	}{
		{"text and rodata; not data, not written, not shared, not without an Anonymous line", "/usr/bin/appliance", []Region{
			{Start: 0x400000, End: 0x1e2a000, Perms: "r-xp", RSS: 19200 << 10},
			{Start: 0x1e2a000, End: 0x4a0c000, Perms: "r--p", RSS: 20800 << 10},
		}},
		{"a deleted binary under a path with a space", "/opt/my dir/appliance (deleted)", []Region{
			{Start: 0x7f0000200000, End: 0x7f0000300000, Perms: "r-xp", RSS: 64 << 10},
		}},
		{"another file", "/usr/bin/other", nil},
		{"no path", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Droppable([]byte(smaps), tc.exe)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("region %d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func FuzzDroppable(f *testing.F) {
	f.Add([]byte(smaps), "/usr/bin/appliance")
	f.Fuzz(func(t *testing.T, b []byte, exe string) {
		for _, r := range Droppable(b, exe) {
			if r.End <= r.Start || r.Perms[1] != '-' || r.Perms[3] != 'p' {
				t.Fatalf("unsafe region %+v", r)
			}
		}
	})
}

// rssFile is this process's RssFile in bytes.
func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n << 10
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestReleaseOnThisProcess releases this test binary's pages: its file RSS
// falls, the regions released hold less than before, and the code and data
// it needs afterwards come back (a GC, a stack trace reading the function
// tables).
func TestReleaseOnThisProcess(t *testing.T) {
	before := rssFile(t)
	released, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFile(t)
	t.Logf("RssFile %d KiB -> %d KiB; %d KiB were mapped in the regions released", before>>10, after>>10, released>>10)
	if released <= 0 || after >= before {
		t.Fatalf("nothing released: RssFile %d -> %d, released %d", before, after, released)
	}
	runtime.GC()
	if st := string(debug.Stack()); !strings.Contains(st, "TestReleaseOnThisProcess") {
		t.Fatalf("stack trace after release does not name this test:\n%s", st)
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var still int64
	for _, r := range Droppable(smaps, exe) {
		still += r.RSS
		// rr: VM_RAND_READ, set by MADV_RANDOM.
		if random := slices.Contains(vmFlags(t, smaps, r.Start), "rr"); random == (r.Perms[2] == 'x') {
			t.Errorf("mapping %#x %s: random-access advice %v, want it on read-only data only", r.Start, r.Perms, random)
		}
	}
	if still >= released {
		t.Errorf("the binary's read-only mappings hold %d KiB again, as many as the %d KiB released", still>>10, released>>10)
	}
}

// vmFlags returns the VmFlags of the mapping at start in smaps.
func vmFlags(t *testing.T, smaps []byte, start uintptr) []string {
	t.Helper()
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		if lo, _, ok := strings.Cut(line, "-"); ok && !strings.Contains(lo, " ") && !strings.Contains(lo, ":") {
			v, err := strconv.ParseUint(lo, 16, 64)
			in = err == nil && uintptr(v) == start
			continue
		}
		if in {
			if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok {
				return strings.Fields(flags)
			}
		}
	}
	t.Fatalf("no VmFlags for the mapping at %#x", start)
	return nil
}
