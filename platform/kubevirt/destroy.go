package kubevirt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

// Destroy deletes the VirtualMachines, DataVolumes, Secrets and PVCs
// labelled with infraID in the namespace, and waits until the VMs and
// volumes are gone. It returns one line per deleted object.
func (p *Provider) Destroy(ctx context.Context, infraID string) ([]string, error) {
	if infraID == "" {
		return nil, errors.New("kubevirt: destroy: empty infra ID")
	}
	return p.destroy(ctx, infraID, client.MatchingLabels{LabelInfraID: infraID})
}

// DestroyVMs removes the VMs of vms' nodes and every object labelled with
// the infra ID and one of those nodes: the VM, its root disk DataVolume and
// PVC, its Ignition Secret. The golden image, labelled with no node, stays.
func (p *Provider) DestroyVMs(ctx context.Context, infraID string, vms []platform.VM) ([]string, error) {
	if infraID == "" {
		return nil, errors.New("kubevirt: destroy: empty infra ID")
	}
	var nodes []string
	for _, v := range vms {
		if v.Node == "" {
			return nil, fmt.Errorf("kubevirt: destroy: VM %s has no %s label; remove it with kubectl", v.Name, LabelNode)
		}
		nodes = append(nodes, v.Node)
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	infra, err := labels.NewRequirement(LabelInfraID, selection.Equals, []string{infraID})
	if err != nil {
		return nil, fmt.Errorf("kubevirt: destroy: %w", err)
	}
	node, err := labels.NewRequirement(LabelNode, selection.In, nodes)
	if err != nil {
		return nil, fmt.Errorf("kubevirt: destroy: nodes %v: %w", nodes, err)
	}
	return p.destroy(ctx, infraID, client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*infra, *node)})
}

// destroy deletes infraID's VMs, DataVolumes, Secrets and PVCs that match,
// then waits until they are gone.
func (p *Provider) destroy(ctx context.Context, infraID string, match client.ListOption) ([]string, error) {
	sel := []client.ListOption{client.InNamespace(p.opts.Namespace), match}
	var lines []string
	// Foreground for VMs: the VM object stays until its instance and the
	// DataVolumes it owns are gone, so waiting for VMs waits for those.
	// A zero grace period asks for power-off rather than a guest shutdown
	// (the cluster is being thrown away); KubeVirt releases that ignore a
	// delete's grace period stop the guest gracefully instead. The rest go
	// in the background (their PVCs are owned and collected).
	var now int64
	kinds := []struct {
		kind   string
		list   client.ObjectList
		policy metav1.DeletionPropagation
		grace  *int64
	}{
		{"virtualmachine", &kubevirtv1.VirtualMachineList{}, metav1.DeletePropagationForeground, &now},
		{"datavolume", &cdiv1.DataVolumeList{}, metav1.DeletePropagationBackground, nil},
		{"secret", &corev1.SecretList{}, metav1.DeletePropagationBackground, nil},
		{"persistentvolumeclaim", &corev1.PersistentVolumeClaimList{}, metav1.DeletePropagationBackground, nil},
	}
	var (
		errs []error
		mu   sync.Mutex // guards lines and errs against the deleting goroutines
	)
	for _, k := range kinds {
		if err := p.c.List(ctx, k.list, sel...); err != nil {
			errs = append(errs, p.errf("kubevirt: destroy: list %ss: %w", k.kind, err))
			continue
		}
		objs, err := meta.ExtractList(k.list)
		if err != nil {
			errs = append(errs, fmt.Errorf("kubevirt: destroy: %ss: %w", k.kind, err))
			continue
		}
		// Deletes run Options.Parallel at once: one at a time, 109 objects
		// cost a round trip each in sequence.
		var g errgroup.Group
		g.SetLimit(p.opts.Parallel)
		for _, o := range objs {
			obj := o.(client.Object)
			if !ours(obj, infraID) { // belt and braces over the selector
				continue
			}
			if obj.GetDeletionTimestamp() != nil {
				continue
			}
			opts := []client.DeleteOption{client.PropagationPolicy(k.policy)}
			if k.grace != nil {
				opts = append(opts, client.GracePeriodSeconds(*k.grace))
			}
			g.Go(func() error {
				err := p.c.Delete(ctx, obj, opts...)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case apierrors.IsNotFound(err): // collected with its owner meanwhile
				case err != nil:
					errs = append(errs, p.errf("kubevirt: destroy: delete %s %s/%s: %w", k.kind, obj.GetNamespace(), obj.GetName(), err))
				default:
					lines = append(lines, fmt.Sprintf("%s %s/%s", k.kind, obj.GetNamespace(), obj.GetName()))
				}
				return nil
			})
		}
		_ = g.Wait() // errors are collected in errs
	}
	sortLines(lines)
	if err := errors.Join(errs...); err != nil {
		return lines, err
	}
	return lines, p.waitDestroyed(ctx, sel)
}

// sortLines orders Destroy's "kind namespace/name" lines by kind, in
// deletion order, then by name: the deletes finish in any order.
func sortLines(lines []string) {
	order := []string{"virtualmachine", "datavolume", "secret", "persistentvolumeclaim"}
	slices.SortFunc(lines, func(a, b string) int {
		ka, na, _ := strings.Cut(a, " ")
		kb, nb, _ := strings.Cut(b, " ")
		if c := slices.Index(order, ka) - slices.Index(order, kb); c != 0 {
			return c
		}
		return strings.Compare(na, nb)
	})
}

// waitDestroyed polls until no labelled VM, DataVolume or PVC remains, so
// an apply right after destroy does not collide with terminating objects.
// It lists metadata only: a VM's spec is kilobytes, and the question is only
// whether it is still there.
func (p *Provider) waitDestroyed(ctx context.Context, sel []client.ListOption) error {
	ctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	// Short first looks, then every quarter second at most: the garbage
	// collector removes the VMs over a few seconds, and a fixed 2 s poll was
	// most of destroy.
	every, most := min(50*time.Millisecond, p.poll), min(250*time.Millisecond, p.poll)
	kinds := []struct {
		kind string
		gvk  schema.GroupVersionKind
	}{
		{"virtualmachine", kubevirtv1.SchemeGroupVersion.WithKind("VirtualMachineList")},
		{"datavolume", cdiv1.SchemeGroupVersion.WithKind("DataVolumeList")},
		{"persistentvolumeclaim", corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList")},
	}
	var left []string
	for {
		var now []string
		for _, k := range kinds {
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(k.gvk)
			if err := p.c.List(ctx, l, sel...); err != nil {
				if ctx.Err() != nil && len(left) > 0 {
					break // the wait is over: report what was left last time
				}
				return p.errf("kubevirt: destroy: wait: %w", err)
			}
			for _, o := range l.Items {
				now = append(now, k.kind+"/"+o.Name)
			}
		}
		if ctx.Err() == nil {
			left = now
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubevirt: destroy: still terminating after %s: %s; see `kubectl -n %s get %s -o yaml` for their finalizers",
				p.wait, strings.Join(left, ", "), p.opts.Namespace, left[0])
		case <-time.After(every):
		}
		every = min(2*every, most)
	}
}
