package ovirt

import (
	"context"
	"fmt"
	"strings"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
)

// mark is the ownership record kept in an object's description.
type mark struct {
	InfraID, Node, Role, Image string
}

const markPrefix = "appliance-provision"

func (m mark) String() string {
	var b strings.Builder
	b.WriteString(markPrefix)
	for _, kv := range [][2]string{{"infraID", m.InfraID}, {"node", m.Node}, {"role", m.Role}, {"image", m.Image}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	return b.String()
}

// parseMark reads a description written by mark.String; ok is false for
// any other text, so a foreign object is never taken for ours.
func parseMark(s string) (m mark, ok bool) {
	f := strings.Fields(s)
	if len(f) < 2 || f[0] != markPrefix {
		return mark{}, false
	}
	for _, kv := range f[1:] {
		k, v, found := strings.Cut(kv, "=")
		if !found || v == "" {
			return mark{}, false
		}
		switch k {
		case "infraID":
			m.InfraID = v
		case "node":
			m.Node = v
		case "role":
			m.Role = v
		case "image":
			m.Image = v
		default:
			return mark{}, false
		}
	}
	if m.InfraID == "" {
		return mark{}, false
	}
	return m, true
}

// completeComment is written to a VM's comment as the last step of Create.
const completeComment = "appliance-provision: complete"

// roleBuilder marks the temporary VM the template is made from.
const roleBuilder = "image-builder"

// findTag returns the ID of the tag named infraID that we created.
func (p *Provider) findTag(ctx context.Context, infraID string) (ovirtclient.TagID, bool, error) {
	tags, err := p.eng(ctx).ListTags()
	if err != nil {
		return "", false, fmt.Errorf("list tags: %w", err)
	}
	foreign := false
	for _, t := range tags {
		if t.Name() != infraID {
			continue
		}
		if d := t.Description(); d != nil {
			if m, ok := parseMark(*d); ok && m.InfraID == infraID {
				return t.ID(), true, nil
			}
		}
		foreign = true
	}
	if foreign {
		return "", false, fmt.Errorf("tag %s exists but was not created by appliance provision (its description lacks %q)", infraID, markPrefix)
	}
	return "", false, nil
}

// ensureTag returns the cluster's tag, creating it once.
func (p *Provider) ensureTag(ctx context.Context, infraID string) (ovirtclient.TagID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.tags[infraID]; ok {
		return id, nil
	}
	id, ok, err := p.findTag(ctx, infraID)
	if err != nil {
		return "", err
	}
	if !ok {
		t, err := p.eng(ctx).CreateTag(infraID, ovirtclient.NewCreateTagParams().MustWithDescription(mark{InfraID: infraID}.String()))
		if err != nil {
			return "", fmt.Errorf("create tag %s: %w", infraID, err)
		}
		id = t.ID()
		p.log.Info("created tag", "tag", infraID)
	}
	p.tags[infraID] = id
	return id, nil
}

// Names of the objects a cluster owns.
func templateName(infraID string) string { return infraID + "-rhcos" }
func builderName(infraID string) string  { return infraID + "-rhcos-builder" }
func imageAlias(infraID string) string   { return infraID + "-rhcos-image" }
func groupName(infraID string, role string) string {
	switch role {
	case "master":
		return infraID + "-controlplane"
	case "worker":
		return infraID + "-compute"
	}
	return ""
}
