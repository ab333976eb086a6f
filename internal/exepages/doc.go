// Package exepages owns the page-table mappings of the process's own binary.
//
// A Go binary's start-up (the runtime, some 400 package inits, flag parsing,
// config loading) touches pages of its text and read-only data that a
// long-running service never reads again, and the kernel maps file pages
// generously around each fault (fault-around, large page-cache folios), so
// most of a freshly started appliance's RSS is its binary: 40 to 50 MiB of an
// 80 MB file. Release drops those mappings once the services run; the pages
// stay in the page cache, and those the services keep using come back on
// their next access as minor faults, without I/O. The read-only data is
// advised random access (MADV_RANDOM), so that the runtime's scattered reads
// of its tables map a page each, not the folio around it. Only read-only private
// mappings of the binary that hold no private (copy-on-write) page are
// touched, so nothing the process wrote is ever lost.
package exepages
