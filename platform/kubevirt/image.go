package kubevirt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

// PrepareImage creates the golden DataVolume that imports spec.Image.URL,
// or reuses one that holds the same image; with a container disk there is
// nothing to prepare. Unless Options.WaitForImport is set it does not wait
// for the import: clones of the golden volume wait for it on the cluster.
// progress gets the import's percentage as done/total of the image size.
func (p *Provider) PrepareImage(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	if spec.Image.ContainerDisk != "" {
		return nil
	}
	if err := p.ensureGolden(ctx, spec, progress); err != nil {
		return err
	}
	if !p.opts.WaitForImport {
		return nil
	}
	return p.waitImported(ctx, spec, progress)
}

// waitImported polls the golden DataVolume until CDI reports it imported.
func (p *Provider) waitImported(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	name := GoldenName(spec.InfraID)
	for {
		dv := &cdiv1.DataVolume{}
		err := p.c.Get(ctx, p.key(name), dv)
		switch {
		case apierrors.IsNotFound(err):
			// Only a retained PVC is left: the import finished long ago.
			return nil
		case err != nil:
			return p.errf("kubevirt: image: wait for DataVolume %s: %w", name, err)
		}
		reportProgress(dv, spec, progress)
		switch dv.Status.Phase {
		case cdiv1.Succeeded:
			return nil
		case cdiv1.Failed:
			return fmt.Errorf("kubevirt: image: import of %s into DataVolume %s failed; see `kubectl -n %s describe datavolume %s`", safeURL(spec.Image.URL), name, p.opts.Namespace, name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubevirt: image: waiting for DataVolume %s (phase %s): %w", name, dv.Status.Phase, ctx.Err())
		case <-time.After(p.poll):
		}
	}
}

// ensureGolden creates or reuses the golden DataVolume.
func (p *Provider) ensureGolden(ctx context.Context, spec *platform.Spec, progress func(done, total int64)) error {
	if spec.Image.URL == "" {
		return fmt.Errorf("kubevirt: image: no URL to import from; a DataVolume imports over HTTP(S), so serve %s or use a container disk", spec.Image.Path)
	}
	size := goldenSizeGiB(spec, p.opts)
	want := BuildGoldenDataVolume(spec, p.opts, size)
	name := want.Name

	got := &cdiv1.DataVolume{}
	err := p.c.Get(ctx, p.key(name), got)
	switch {
	case apierrors.IsNotFound(err):
		// CDI may have garbage-collected a finished DataVolume and kept
		// its PVC; the PVC then is the golden volume.
		pvc := &corev1.PersistentVolumeClaim{}
		if err := p.c.Get(ctx, p.key(name), pvc); err == nil {
			if !ours(pvc, spec.InfraID) {
				return fmt.Errorf("kubevirt: image: PVC %s/%s exists without label %s=%s; remove it or pick another infra ID", p.opts.Namespace, name, LabelInfraID, spec.InfraID)
			}
			p.log.Info("kubevirt: reusing golden image volume", "pvc", name)
			return nil
		} else if !apierrors.IsNotFound(err) {
			return p.errf("kubevirt: image: get PVC %s: %w", name, err)
		}
		return p.createGolden(ctx, want, size)
	case err != nil:
		return p.errf("kubevirt: image: get DataVolume %s: %w", name, err)
	}
	if !ours(got, spec.InfraID) {
		return fmt.Errorf("kubevirt: image: DataVolume %s/%s exists without label %s=%s; remove it or pick another infra ID", p.opts.Namespace, name, LabelInfraID, spec.InfraID)
	}
	if reason := staleGolden(got, spec); reason != "" {
		p.log.Info("kubevirt: replacing golden image", "datavolume", name, "reason", reason)
		if err := p.c.Delete(ctx, got, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil && !apierrors.IsNotFound(err) {
			return p.errf("kubevirt: image: delete stale DataVolume %s: %w", name, err)
		}
		if err := p.waitGone(ctx, &cdiv1.DataVolume{}, name); err != nil {
			return err
		}
		return p.createGolden(ctx, want, size)
	}
	reportProgress(got, spec, progress)
	p.log.Debug("kubevirt: golden image exists", "datavolume", name, "phase", got.Status.Phase)
	return nil
}

func (p *Provider) createGolden(ctx context.Context, dv *cdiv1.DataVolume, size int) error {
	err := p.c.Create(ctx, dv)
	if apierrors.IsAlreadyExists(err) {
		// Another apply made it between our Get and Create.
		return nil
	}
	if err != nil {
		return p.errf("kubevirt: image: create DataVolume %s (%d GiB from %s): %w", dv.Name, size, safeURL(dv.Spec.Source.HTTP.URL), err)
	}
	p.log.Info("kubevirt: importing golden image", "datavolume", dv.Name, "url", safeURL(dv.Spec.Source.HTTP.URL), "sizeGiB", size)
	return nil
}

// staleGolden says why an existing golden DataVolume cannot be reused, or
// "" when it can: it holds another image, or its import failed.
func staleGolden(dv *cdiv1.DataVolume, spec *platform.Spec) string {
	if dv.Status.Phase == cdiv1.Failed {
		return "import failed"
	}
	// The digest decides when both sides know it: the same image from
	// another mirror is still the same image.
	if sum := dv.Annotations[AnnotationImageSHA256]; spec.Image.SHA256 != "" && sum != "" {
		if sum != spec.Image.SHA256 {
			return "image digest changed"
		}
		return ""
	}
	if dv.Spec.Source == nil || dv.Spec.Source.HTTP == nil || dv.Spec.Source.HTTP.URL != spec.Image.URL {
		return "image URL changed"
	}
	return ""
}

// safeURL is u without a password, for logs and errors.
func safeURL(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return pu.Redacted()
}

// reportProgress turns CDI's "45.20%" into bytes of the image.
func reportProgress(dv *cdiv1.DataVolume, spec *platform.Spec, progress func(done, total int64)) {
	if progress == nil {
		return
	}
	total := spec.Image.Size
	if total <= 0 {
		total = 100
	}
	if dv.Status.Phase == cdiv1.Succeeded {
		progress(total, total)
		return
	}
	pct, err := strconv.ParseFloat(strings.TrimSuffix(string(dv.Status.Progress), "%"), 64)
	if err != nil || pct < 0 || pct > 100 {
		return
	}
	progress(int64(pct/100*float64(total)), total)
}

// goldenSizeGiB sizes the golden volume: the option, else the image's
// virtual size (a qcow2 header read from Path), else 16 GiB, the size RHCOS
// images are built with; plus headroom.
func goldenSizeGiB(spec *platform.Spec, opts Options) int {
	if opts.ImageDiskGiB > 0 {
		return opts.ImageDiskGiB
	}
	var virt int64
	switch spec.Image.Format {
	case "qcow2":
		if f, err := os.Open(spec.Image.Path); err == nil {
			hdr := make([]byte, 32)
			if _, err := f.ReadAt(hdr, 0); err == nil {
				virt, _ = qcow2VirtualSize(hdr)
			}
			f.Close()
		}
	case "raw":
		virt = spec.Image.Size
	}
	if virt <= 0 {
		virt = 16 << 30
	}
	// Round up, and leave a GiB of headroom over the guest-visible size.
	g := int((virt + 1<<30 - 1) >> 30)
	return g + 1
}

// qcow2VirtualSize reads the guest-visible size from a qcow2 header.
func qcow2VirtualSize(hdr []byte) (int64, error) {
	if len(hdr) < 32 || string(hdr[:4]) != "QFI\xfb" {
		return 0, errors.New("not a qcow2 header")
	}
	var n uint64
	for _, b := range hdr[24:32] {
		n = n<<8 | uint64(b)
	}
	if n == 0 || n > 1<<50 {
		return 0, fmt.Errorf("qcow2 virtual size %d out of range", n)
	}
	return int64(n), nil
}

// waitGone polls until the named object no longer exists.
func (p *Provider) waitGone(ctx context.Context, obj client.Object, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	for {
		err := p.c.Get(ctx, p.key(name), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return p.errf("kubevirt: wait for %s to go: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubevirt: %s still terminating after %s", name, p.wait)
		case <-time.After(p.poll):
		}
	}
}
