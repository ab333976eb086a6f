package ovirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"

	"appliance/platform"
)

// PrepareImage makes the template "<infraID>-rhcos" from spec.Image: upload
// the image as a disk, attach it to a temporary VM of OS type rhcos_x64,
// make the template from that VM, remove the VM. A complete template for
// the same image digest is reused; one the engine is still creating is
// waited for; one for another digest or left illegal is replaced. A
// temporary VM whose upload finished is reused, so an interruption after
// the upload does not upload again.
func (p *Provider) PrepareImage(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	if err := p.prepareImage(ctx, spec, progress); err != nil {
		return p.s.err(fmt.Errorf("ovirt: prepare image %s: %w", templateName(spec.InfraID), err))
	}
	return nil
}

func (p *Provider) prepareImage(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	infraID := spec.InfraID
	if infraID == "" {
		return errors.New("spec has no infraID")
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	e := p.eng(ctx)
	if _, err := p.ensureTag(ctx, infraID); err != nil {
		return err
	}
	want := mark{InfraID: infraID, Image: spec.Image.SHA256}

	tpl, err := p.findTemplate(ctx, infraID)
	if err != nil {
		return err
	}
	if tpl != nil {
		m, _ := parseMark(tpl.Description())
		if m.Image == want.Image && tpl.Status() != ovirtclient.TemplateStatusIllegal {
			// Complete, or still being made by the engine after we were
			// interrupted: either way it is the one we want.
			if err := p.waitTemplate(ctx, tpl.ID()); err != nil {
				return err
			}
			if err := p.removeBuilder(ctx, infraID); err != nil {
				return err
			}
			p.log.Info("template exists", "template", tpl.Name())
			progress(spec.Image.Size, spec.Image.Size)
			return nil
		}
		p.log.Info("replacing template", "template", tpl.Name(), "reason", "other image or illegal")
		if err := p.wait(ctx, "template "+tpl.Name()+" unlock", func() (bool, error) {
			t, err := e.GetTemplate(tpl.ID())
			return err == nil && t.Status() != ovirtclient.TemplateStatusLocked, err
		}); err != nil {
			return err
		}
		if err := e.RemoveTemplate(tpl.ID()); err != nil && !notFound(err) {
			return fmt.Errorf("remove template %s: %w", tpl.Name(), err)
		}
	}

	builder, err := p.reusableBuilder(ctx, want)
	if err != nil {
		return err
	}
	if builder == nil {
		if err := p.removeBuilder(ctx, infraID); err != nil {
			return err
		}
		if _, err := p.removeImageDisks(ctx, infraID); err != nil {
			return err
		}
		disk, err := p.upload(ctx, spec, progress)
		if err != nil {
			return err
		}
		if builder, err = p.createBuilder(ctx, want, disk); err != nil {
			return err
		}
	} else {
		p.log.Info("reusing uploaded image", "vm", builder.Name())
		progress(spec.Image.Size, spec.Image.Size)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	name := templateName(infraID)
	t, err := e.CreateTemplate(builder.ID(), name, ovirtclient.TemplateCreateParams().MustWithDescription(want.String()))
	if err != nil {
		return fmt.Errorf("create template from VM %s: %w", builder.Name(), err)
	}
	if err := p.waitTemplate(ctx, t.ID()); err != nil {
		return err
	}
	p.log.Info("created template", "template", name)
	return p.removeBuilder(ctx, infraID)
}

// removeImageDisks removes uploads that never reached the temporary VM
// (interrupted uploads). Disks cannot carry a mark, so they are found by
// their exact alias; any disk with that alias that is attached to one of
// our VMs or our template (an engine keeps the alias on copies) is kept.
func (p *Provider) removeImageDisks(ctx context.Context, infraID string) (int, error) {
	e := p.eng(ctx)
	disks, err := e.ListDisks()
	if err != nil {
		return 0, fmt.Errorf("list disks: %w", err)
	}
	alias := imageAlias(infraID)
	var cands []ovirtclient.Disk
	for _, d := range disks {
		if d.Alias() == alias {
			cands = append(cands, d)
		}
	}
	if len(cands) == 0 {
		return 0, nil
	}
	keep := map[ovirtclient.DiskID]bool{}
	vms, err := p.ownedVMs(ctx, infraID)
	if err != nil {
		return 0, err
	}
	for _, o := range vms {
		atts, err := e.ListDiskAttachments(o.vm.ID())
		if err != nil && !notFound(err) {
			return 0, fmt.Errorf("disks of VM %s: %w", o.vm.Name(), err)
		}
		for _, a := range atts {
			keep[a.DiskID()] = true
		}
	}
	if tpl, err := p.findTemplate(ctx, infraID); err != nil {
		return 0, err
	} else if tpl != nil {
		atts, err := e.ListTemplateDiskAttachments(tpl.ID())
		if err != nil {
			return 0, fmt.Errorf("disks of template %s: %w", tpl.Name(), err)
		}
		for _, a := range atts {
			keep[a.DiskID()] = true
		}
	}
	n := 0
	for _, d := range cands {
		if keep[d.ID()] {
			continue
		}
		if d.Status() == ovirtclient.DiskStatusLocked {
			if err := p.waitDiskOK(ctx, d.ID()); err != nil && !notFound(err) {
				return n, err
			}
		}
		if err := e.RemoveDisk(d.ID()); err != nil && !notFound(err) {
			return n, fmt.Errorf("remove disk %s (%s): %w", alias, d.ID(), err)
		}
		n++
	}
	return n, nil
}

// upload sends the image file to a new disk and waits until it is usable.
func (p *Provider) upload(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) (ovirtclient.Disk, error) {
	f, err := os.Open(spec.Image.Path)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	format, err := imageFormat(spec.Image.Format, f)
	if err != nil {
		return nil, err
	}
	alias := imageAlias(spec.InfraID)
	r := &progressReader{f: f, ctx: ctx, total: st.Size(), fn: progress}
	p.log.Info("uploading image", "path", spec.Image.Path, "bytes", st.Size(), "disk", alias)
	up, err := p.eng(ctx).StartUploadToNewDisk(ovirtclient.StorageDomainID(p.opts.StorageDomainID), format,
		uint64(st.Size()), ovirtclient.CreateDiskParams().MustWithAlias(alias).MustWithSparse(true), r)
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", spec.Image.Path, err)
	}
	// The reader fails as soon as ctx ends, so Done follows promptly.
	<-up.Done()
	if err := up.Err(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("upload %s: %w", spec.Image.Path, ctx.Err())
		}
		return nil, fmt.Errorf("upload %s: %w", spec.Image.Path, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	disk := up.Disk()
	if disk == nil {
		return nil, fmt.Errorf("upload %s: engine returned no disk", spec.Image.Path)
	}
	if err := p.waitDiskOK(ctx, disk.ID()); err != nil {
		return nil, err
	}
	progress(st.Size(), st.Size())
	return disk, nil
}

// imageFormat maps the image's format to the engine's; an empty format is
// read from the file's magic.
func imageFormat(format string, f io.ReadSeeker) (ovirtclient.ImageFormat, error) {
	switch format {
	case "qcow2":
		return ovirtclient.ImageFormatCow, nil
	case "raw":
		return ovirtclient.ImageFormatRaw, nil
	case "":
		magic := make([]byte, 4)
		_, err := io.ReadFull(f, magic)
		if _, serr := f.Seek(0, io.SeekStart); serr != nil {
			return "", fmt.Errorf("image: %w", serr)
		}
		if err == nil && string(magic) == "QFI\xfb" {
			return ovirtclient.ImageFormatCow, nil
		}
		return ovirtclient.ImageFormatRaw, nil
	}
	return "", fmt.Errorf("image format %q: want qcow2 or raw", format)
}

// progressReader reports upload progress as the client reads the file and
// stops the upload when ctx ends. (The mock's own progress counter does not
// advance, so progress is counted here for both.)
type progressReader struct {
	f     *os.File
	ctx   context.Context
	done  int64
	total int64
	fn    func(done, total int64)
}

func (r *progressReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.f.Read(b)
	r.done += int64(n)
	if n > 0 {
		r.fn(min(r.done, r.total), r.total)
	}
	return n, err
}

func (r *progressReader) Seek(off int64, whence int) (int64, error) {
	pos, err := r.f.Seek(off, whence)
	if err == nil {
		r.done = pos
	}
	return pos, err
}

// Close is a no-op: upload owns the file.
func (r *progressReader) Close() error { return nil }
