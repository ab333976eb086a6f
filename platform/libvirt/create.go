package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/kdomanski/iso9660"

	"appliance/platform"
)

// nodeDomain reads m's domain: found is false when it does not exist; an
// error says when a domain of that name is not this node's.
func (p *Provider) nodeDomain(spec *platform.Spec, m platform.Machine) (golibvirt.Domain, Mark, bool, error) {
	dom, found, err := p.lookupDomain(m.Name)
	if err != nil || !found {
		return dom, Mark{}, false, err
	}
	mk, err := p.domainMark(dom)
	if errors.Is(err, errNoMark) || (err == nil && (mk.InfraID != spec.InfraID || mk.Kind != kindNode || mk.Node != m.Node)) {
		return dom, Mark{}, false, fmt.Errorf("libvirt: domain %s exists and was not created for node %s of %s; remove or rename it", m.Name, m.Node, spec.InfraID)
	}
	if err != nil {
		return dom, Mark{}, false, err
	}
	return dom, mk, true, nil
}

// Create defines m's domain, then creates its volumes, then flags the
// domain complete. The domain (with the list of volumes it owns) exists
// before any of them, so an interruption leaves nothing unmarked; a re-run
// finds the incomplete domain, recreates its volumes (none has been used:
// the domain was never started) and finishes. A complete domain is left as
// it is.
func (p *Provider) Create(ctx context.Context, spec *platform.Spec, m platform.Machine, stage func(string)) error {
	if stage == nil {
		stage = func(string) {}
	}
	if err := validateMachine(m); err != nil {
		return err
	}
	dom, mk, found, err := p.nodeDomain(spec, m)
	if err != nil {
		return err
	}
	if found && mk.Complete {
		stage("exists")
		return nil
	}
	vols := volumesFor(spec.Image.Flavor, m)
	names := []string{vols.Disk, vols.Ignition, vols.ConfigDrive}
	if !found {
		// Never adopt a volume we did not create: it would be deleted by
		// destroy.
		for _, n := range names {
			if n == "" {
				continue
			}
			if _, exists, err := p.lookupVol(n); err != nil {
				return err
			} else if exists {
				return fmt.Errorf("libvirt: volume %s/%s exists but no appliance mark claims it; delete it or use another pool", p.pool.Name, n)
			}
		}
	}
	basePath, baseCap, err := p.baseVolume(spec)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	stage("define")
	uuid := ""
	if found {
		uuid = uuidString(dom.UUID)
	}
	d, err := buildNodeDomain(spec, m, p.pool, p.hs, uuid, false)
	if err != nil {
		return err
	}
	if dom, err = p.define(d); err != nil {
		return err
	}
	uuid = uuidString(dom.UUID)
	if err := p.step(ctx, m, "define"); err != nil {
		return err
	}
	if found {
		// Leftovers of an interrupted run: ours, listed by the mark.
		for _, n := range names {
			if n == "" {
				continue
			}
			if _, err := p.deleteVolIfExists(p.pool.Name, n); err != nil {
				return err
			}
		}
	}

	stage("disk")
	doc, err := overlayVolumeXML(vols.Disk, m.DiskGiB, basePath, spec.Image.Format, baseCap)
	if err != nil {
		return fmt.Errorf("libvirt: volume %s: %w", vols.Disk, err)
	}
	if _, err := p.createVol(vols.Disk, doc); err != nil {
		return err
	}
	if err := p.step(ctx, m, "disk"); err != nil {
		return err
	}

	payload, volName := m.Ignition, vols.Ignition
	if vols.ConfigDrive != "" {
		stage("config-drive")
		if payload, err = configDrive(m.Ignition); err != nil {
			return fmt.Errorf("libvirt: machine %s: %w", m.Node, err)
		}
		volName = vols.ConfigDrive
	} else {
		stage("ignition")
	}
	if doc, err = rawVolumeXML(volName, int64(len(payload))); err != nil {
		return fmt.Errorf("libvirt: volume %s: %w", volName, err)
	}
	v, err := p.createVol(volName, doc)
	if err != nil {
		return err
	}
	if err := p.upload(ctx, v, bytes.NewReader(payload), int64(len(payload)), nil); err != nil {
		return err
	}
	if err := p.step(ctx, m, "ignition"); err != nil {
		return err
	}

	stage("finish")
	if d, err = buildNodeDomain(spec, m, p.pool, p.hs, uuid, true); err != nil {
		return err
	}
	if _, err := p.define(d); err != nil {
		return err
	}
	return nil
}

// step ends Create early when ctx is done or a test's hook says so.
func (p *Provider) step(ctx context.Context, m platform.Machine, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.hook != nil {
		return p.hook(m.Node, name)
	}
	return nil
}

// configDrive builds an OpenStack config-drive ISO (volume label config-2)
// holding the Ignition config as openstack/latest/user_data.
func configDrive(ign []byte) ([]byte, error) {
	w, err := iso9660.NewWriter()
	if err != nil {
		return nil, fmt.Errorf("config drive: %w", err)
	}
	defer w.Cleanup()
	if err := w.AddFile(bytes.NewReader(ign), "openstack/latest/user_data"); err != nil {
		return nil, fmt.Errorf("config drive: %w", err)
	}
	var buf bytes.Buffer
	if err := w.WriteTo(&buf, "config-2"); err != nil {
		return nil, fmt.Errorf("config drive: %w", err)
	}
	return buf.Bytes(), nil
}
