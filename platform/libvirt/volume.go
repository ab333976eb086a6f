package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// lookupVol finds a volume by name in the provider's pool.
func (p *Provider) lookupVol(name string) (golibvirt.StorageVol, bool, error) {
	return p.lookupVolIn(p.pool.Name, name)
}

func (p *Provider) lookupVolIn(pool, name string) (golibvirt.StorageVol, bool, error) {
	pl, err := p.l.StoragePoolLookupByName(pool)
	if err != nil {
		return golibvirt.StorageVol{}, false, fmt.Errorf("libvirt: pool %q: %w", pool, err)
	}
	v, err := p.l.StorageVolLookupByName(pl, name)
	if isCode(err, golibvirt.ErrNoStorageVol) {
		return v, false, nil
	}
	if err != nil {
		return v, false, fmt.Errorf("libvirt: look up volume %s/%s: %w", pool, name, err)
	}
	return v, true, nil
}

// createVol creates a volume in the provider's pool from its XML.
func (p *Provider) createVol(name, doc string) (golibvirt.StorageVol, error) {
	pl, err := p.l.StoragePoolLookupByName(p.pool.Name)
	if err != nil {
		return golibvirt.StorageVol{}, fmt.Errorf("libvirt: pool %q: %w", p.pool.Name, err)
	}
	v, err := p.l.StorageVolCreateXML(pl, doc, 0)
	if err != nil {
		return v, fmt.Errorf("libvirt: create volume %s/%s: %w", p.pool.Name, name, err)
	}
	return v, nil
}

// deleteVolIfExists deletes a volume; a missing one is not an error.
func (p *Provider) deleteVolIfExists(pool, name string) (bool, error) {
	v, found, err := p.lookupVolIn(pool, name)
	if err != nil || !found {
		return false, err
	}
	if err := p.l.StorageVolDelete(v, golibvirt.StorageVolDeleteNormal); err != nil {
		if isCode(err, golibvirt.ErrNoStorageVol) {
			return false, nil
		}
		return false, fmt.Errorf("libvirt: delete volume %s/%s: %w", pool, name, err)
	}
	return true, nil
}

// upload streams size bytes from r into v. Cancelling ctx or a read error
// ends the stream early (go-libvirt cannot abort a stream cleanly), and the
// short upload is reported as an error, so the caller never marks it done.
func (p *Provider) upload(ctx context.Context, v golibvirt.StorageVol, r io.Reader, size int64, progress func(done, total int64)) error {
	cr := &countingReader{ctx: ctx, r: r, total: size, progress: progress}
	err := p.l.StorageVolUpload(v, cr, 0, uint64(size), 0)
	if err != nil {
		if isCode(err, golibvirt.ErrNoSupport) && p.isTestDriver() {
			// test:///default stores no volume contents; nothing to send.
			if progress != nil {
				progress(size, size)
			}
			return nil
		}
		return fmt.Errorf("libvirt: upload to volume %s: %w", v.Name, err)
	}
	if cr.err != nil {
		return fmt.Errorf("libvirt: upload to volume %s interrupted after %d of %d bytes: %w", v.Name, cr.done, size, cr.err)
	}
	if cr.done != size {
		return fmt.Errorf("libvirt: upload to volume %s: sent %d of %d bytes", v.Name, cr.done, size)
	}
	return nil
}

type countingReader struct {
	ctx         context.Context
	r           io.Reader
	done, total int64
	progress    func(done, total int64)
	err         error
}

func (c *countingReader) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, io.EOF
	}
	if err := c.ctx.Err(); err != nil {
		c.err = err
		return 0, io.EOF
	}
	// Stop at total even if the file grew meanwhile.
	if rest := c.total - c.done; int64(len(b)) > rest {
		b = b[:rest]
	}
	if len(b) == 0 {
		return 0, io.EOF
	}
	n, err := c.r.Read(b)
	c.done += int64(n)
	if c.progress != nil && n > 0 {
		c.progress(c.done, c.total)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		c.err = err
		return n, io.EOF
	}
	return n, err
}

// isTestDriver reports test:///default, which keeps no volume contents.
func (p *Provider) isTestDriver() bool { return strings.EqualFold(p.driver, "test") }
