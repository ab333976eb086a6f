package render

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Marker is the file WriteDir leaves in every folder it writes. It is how a
// later run knows that replacing the folder loses nothing but its own files.
const Marker = ".appliance-render"

// WriteDir makes dir hold exactly files, all at once: they are written into
// a new folder beside dir, synced, and then swapped with dir in one rename
// (RENAME_EXCHANGE), so a reader sees the old set or the new one, never a
// mix. An existing dir must be empty or hold the Marker of an earlier run;
// anything else is refused rather than replaced.
func WriteDir(dir string, files []File) error {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	exists, err := checkOut(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("render: --out %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".render-")
	if err != nil {
		return fmt.Errorf("render: --out %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp) // after the swap, it holds the old files
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	marker := File{Path: Marker, Data: []byte("Written by `appliance render`; the folder is replaced as a whole when it runs again.\n")}
	dirs := map[string]bool{tmp: true}
	for _, f := range append(files, marker) {
		if !filepath.IsLocal(f.Path) {
			return fmt.Errorf("render: file path %q is not inside the output folder", f.Path)
		}
		p := filepath.Join(tmp, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("render: %s: %w", f.Path, err)
		}
		for d := filepath.Dir(p); d != tmp && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		mode := fs.FileMode(0o644)
		if f.Secret {
			mode = 0o600
		}
		if err := writeSynced(p, f.Data, mode); err != nil {
			return fmt.Errorf("render: %s: %w", f.Path, err)
		}
	}
	for d := range dirs {
		if err := syncPath(d); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	}
	if exists {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			// A file system without the exchange: two renames, a short
			// moment without dir.
			old := tmp + ".old"
			if err = os.Rename(dir, old); err == nil {
				if err = os.Rename(tmp, dir); err != nil {
					_ = os.Rename(old, dir)
				}
				defer os.RemoveAll(old)
			}
		}
	} else {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		return fmt.Errorf("render: --out %s: replace: %w", dir, err)
	}
	return syncPath(parent)
}

// checkOut reports whether dir exists, and refuses a dir that holds files
// of someone else.
func checkOut(dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("render: --out %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("render: --out %s is not a folder", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("render: --out %s: %w", dir, err)
	}
	if len(ents) == 0 {
		return true, nil
	}
	if _, err := os.Stat(filepath.Join(dir, Marker)); err != nil {
		names := make([]string, 0, 3)
		for _, e := range ents[:min(3, len(ents))] {
			names = append(names, e.Name())
		}
		return false, fmt.Errorf("render: --out %s holds files appliance render did not write (%s); it would replace the whole folder, so give an empty or new one",
			dir, strings.Join(names, ", "))
	}
	return true, nil
}

func writeSynced(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
