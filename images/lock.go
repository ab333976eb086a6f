package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// lock takes an exclusive flock on the artifact's lock file, waiting until
// ctx ends. flock, unlike an O_EXCL marker, is released by the kernel when
// the holder dies, so a kill -9 never leaves the cache locked.
func (f *Fetcher) lock(ctx context.Context, key string) (unlock func(), err error) {
	p := filepath.Join(f.dir, key+".lock")
	fl, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("images: lock: %w", err)
	}
	logged := false
	for {
		err := unix.Flock(int(fl.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() {
				_ = unix.Flock(int(fl.Fd()), unix.LOCK_UN)
				fl.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			fl.Close()
			return nil, fmt.Errorf("images: lock %s: %w", p, err)
		}
		if !logged {
			f.log.Info("waiting for another fetch of the same image", "lock", p)
			logged = true
		}
		select {
		case <-ctx.Done():
			fl.Close()
			return nil, fmt.Errorf("images: waiting for lock %s: %w", p, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
