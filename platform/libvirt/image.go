package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"

	golibvirt "github.com/digitalocean/go-libvirt"

	"appliance/platform"
)

// imageMarker reads infraID's image marker domain; found is false when it
// does not exist, and an error says when a domain of that name is not ours.
func (p *Provider) imageMarker(infraID string) (golibvirt.Domain, Mark, bool, error) {
	name := imageDomainName(infraID)
	dom, found, err := p.lookupDomain(name)
	if err != nil || !found {
		return dom, Mark{}, false, err
	}
	mk, err := p.domainMark(dom)
	if errors.Is(err, errNoMark) || (err == nil && (mk.InfraID != infraID || mk.Kind != kindImage)) {
		return dom, Mark{}, false, fmt.Errorf("libvirt: domain %s exists and is not this cluster's image marker; remove or rename it", name)
	}
	if err != nil {
		return dom, Mark{}, false, err
	}
	return dom, mk, true, nil
}

// baseEntry finds the mark's entry for volume name.
func baseEntry(mk *Mark, name string) *MarkVolume {
	for i := range mk.Volumes {
		if mk.Volumes[i].Name == name && mk.Volumes[i].Purpose == purposeBase {
			return &mk.Volumes[i]
		}
	}
	return nil
}

func checkImage(spec *platform.Spec) (platform.Image, error) {
	img := spec.Image
	if spec.InfraID == "" {
		return img, errors.New("libvirt: spec: infraID is empty")
	}
	if img.Path == "" || img.SHA256 == "" {
		return img, errors.New("libvirt: spec: image path and sha256 are required")
	}
	if img.Format != "" && img.Format != "qcow2" && img.Format != "raw" {
		return img, fmt.Errorf("libvirt: spec: image format %q: want qcow2 or raw", img.Format)
	}
	if img.Format == "" {
		img.Format = "qcow2"
	}
	st, err := os.Stat(img.Path)
	if err != nil {
		return img, fmt.Errorf("libvirt: image: %w", err)
	}
	if img.Size == 0 {
		img.Size = st.Size()
	}
	if img.Size != st.Size() {
		return img, fmt.Errorf("libvirt: image %s: size %d, spec says %d", img.Path, st.Size(), img.Size)
	}
	return img, nil
}

// PrepareImage uploads spec.Image into the pool as the base volume
// "<infraID>-base-<digest>", owned by the image marker domain. The marker
// lists the volume before it is created and flags it complete only after
// the whole file went through and the volume's size matches, so an
// interrupted upload is found and redone and a finished one is reused.
func (p *Provider) PrepareImage(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	img, err := checkImage(spec)
	if err != nil {
		return err
	}
	name := baseVolumeName(img, spec.InfraID)
	dom, mk, found, err := p.imageMarker(spec.InfraID)
	if err != nil {
		return err
	}
	uuid := ""
	if found {
		uuid = uuidString(dom.UUID)
	} else {
		if _, exists, err := p.lookupVol(name); err != nil {
			return err
		} else if exists {
			return fmt.Errorf("libvirt: volume %s/%s exists but no appliance mark claims it; delete it or use another pool", p.pool.Name, name)
		}
		mk = Mark{InfraID: spec.InfraID, Kind: kindImage, Complete: true}
	}
	e := baseEntry(&mk, name)
	if e != nil && e.Complete {
		if ok, err := p.baseComplete(name, img.Size); err != nil {
			return err
		} else if ok {
			p.log.Info("base image already uploaded", "volume", name)
			if progress != nil {
				progress(img.Size, img.Size)
			}
			return nil
		}
		p.log.Warn("base image volume is missing or short; uploading again", "volume", name)
		e.Complete = false
	}
	if e == nil {
		mk.Volumes = append(mk.Volumes, MarkVolume{Pool: p.pool.Name, Name: name, Purpose: purposeBase, SHA256: img.SHA256})
		e = &mk.Volumes[len(mk.Volumes)-1]
	}
	// Claim the volume in the marker before it exists.
	if uuid, err = p.defineImageMarker(spec.InfraID, mk, uuid); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := p.deleteVolIfExists(p.pool.Name, name); err != nil {
		return err
	}
	doc, err := baseVolumeXML(name, img)
	if err != nil {
		return fmt.Errorf("libvirt: volume %s: %w", name, err)
	}
	vol, err := p.createVol(name, doc)
	if err != nil {
		return err
	}
	f, err := os.Open(img.Path)
	if err != nil {
		return fmt.Errorf("libvirt: image: %w", err)
	}
	defer f.Close()
	p.log.Info("uploading base image", "volume", name, "bytes", img.Size)
	if err := p.upload(ctx, vol, f, img.Size, progress); err != nil {
		return err
	}
	if ok, err := p.baseComplete(name, img.Size); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("libvirt: volume %s/%s is shorter than the %d bytes uploaded", p.pool.Name, name, img.Size)
	}
	e = baseEntry(&mk, name)
	e.Complete = true
	if _, err := p.defineImageMarker(spec.InfraID, mk, uuid); err != nil {
		return err
	}
	return nil
}

func (p *Provider) defineImageMarker(infraID string, mk Mark, uuid string) (string, error) {
	d, err := buildImageDomain(infraID, mk, p.opts.DomainType, uuid)
	if err != nil {
		return "", err
	}
	dom, err := p.define(d)
	if err != nil {
		return "", err
	}
	return uuidString(dom.UUID), nil
}

// baseComplete checks that the base volume exists and, where the driver
// stores contents, that its file holds at least size bytes.
func (p *Provider) baseComplete(name string, size int64) (bool, error) {
	v, found, err := p.lookupVol(name)
	if err != nil || !found {
		return false, err
	}
	if p.isTestDriver() {
		return true, nil
	}
	_, _, physical, err := p.l.StorageVolGetInfoFlags(v, uint32(golibvirt.StorageVolGetPhysical))
	if err != nil {
		return false, fmt.Errorf("libvirt: volume %s/%s info: %w", p.pool.Name, name, err)
	}
	return physical >= uint64(size), nil
}

// baseVolume returns the complete base volume Create backs disks with.
func (p *Provider) baseVolume(spec *platform.Spec) (path string, capacity uint64, err error) {
	// Only the name is needed: the local file may be gone from the cache.
	img := spec.Image
	if img.Format == "" {
		img.Format = "qcow2"
	}
	name := baseVolumeName(img, spec.InfraID)
	_, mk, found, err := p.imageMarker(spec.InfraID)
	if err != nil {
		return "", 0, err
	}
	if e := baseEntry(&mk, name); !found || e == nil || !e.Complete {
		return "", 0, fmt.Errorf("libvirt: base image %s/%s is not uploaded yet (PrepareImage first)", p.pool.Name, name)
	}
	v, ok, err := p.lookupVol(name)
	if err != nil {
		return "", 0, err
	}
	if !ok {
		return "", 0, fmt.Errorf("libvirt: base image volume %s/%s is missing", p.pool.Name, name)
	}
	if path, err = p.l.StorageVolGetPath(v); err != nil {
		return "", 0, fmt.Errorf("libvirt: volume %s/%s path: %w", p.pool.Name, name, err)
	}
	if _, capacity, _, err = p.l.StorageVolGetInfo(v); err != nil {
		return "", 0, fmt.Errorf("libvirt: volume %s/%s info: %w", p.pool.Name, name, err)
	}
	return path, capacity, nil
}
