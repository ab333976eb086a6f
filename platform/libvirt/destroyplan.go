package libvirt

import (
	"sort"
)

// markedDomain is a domain as Destroy sees it: its name and its mark, or
// Foreign when it carries none of ours.
type markedDomain struct {
	Name    string
	Mark    Mark
	Foreign bool
}

// destroyStep removes one domain and the volumes it owns. Volumes are
// deleted before the domain is undefined, so an interrupted destroy leaves
// every remaining volume still listed by a remaining domain.
type destroyStep struct {
	Domain  string
	Kind    string
	Volumes []MarkVolume
}

// planDestroy selects infraID's domains from all and orders them: nodes
// first (their disks are overlays on the base image), then the image marker.
// A volume that a surviving domain also lists is kept, so a mark that names
// someone else's volume by mistake never deletes it.
func planDestroy(all []markedDomain, infraID string) []destroyStep {
	if infraID == "" {
		return nil
	}
	kept := map[[2]string]bool{}
	for _, d := range all {
		if d.Foreign || d.Mark.InfraID == infraID {
			continue
		}
		for _, v := range d.Mark.Volumes {
			kept[[2]string{v.Pool, v.Name}] = true
		}
	}
	var steps []destroyStep
	for _, d := range all {
		if d.Foreign || d.Mark.InfraID != infraID {
			continue
		}
		s := destroyStep{Domain: d.Name, Kind: d.Mark.Kind}
		for _, v := range d.Mark.Volumes {
			if v.Name == "" || kept[[2]string{v.Pool, v.Name}] {
				continue
			}
			s.Volumes = append(s.Volumes, v)
		}
		steps = append(steps, s)
	}
	sort.SliceStable(steps, func(i, j int) bool {
		ai, aj := steps[i].Kind == kindImage, steps[j].Kind == kindImage
		if ai != aj {
			return !ai
		}
		return steps[i].Domain < steps[j].Domain
	})
	return steps
}
