package libvirt

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"

	"appliance/platform"
)

// Namespace is the XML namespace of the element this package puts in a
// domain's <metadata>; libvirt keeps one element per namespace.
const Namespace = "urn:appliance:provision:libvirt:1"

// metaPrefix is the prefix we write; readers match the namespace, not it.
const metaPrefix = "appliance"

// Kinds of marked domains.
const (
	kindNode  = "node"  // a cluster VM
	kindImage = "image" // the never-started marker that owns base images
)

// Mark is what a domain's metadata says about it.
type Mark struct {
	InfraID string
	// Kind is "node" for a cluster VM or "image" for the base-image marker.
	Kind string
	// Node and Role are the node this VM was created for (empty for images).
	Node, Role string
	// Complete is set once every volume below exists and holds its content.
	Complete bool
	// Volumes are owned by this domain and deleted with it.
	Volumes []MarkVolume
}

// MarkVolume is one storage volume a marked domain owns.
type MarkVolume struct {
	Pool, Name string
	// Purpose: "disk", "ignition", "config-drive" or "base".
	Purpose string
	// SHA256 and Complete describe a base image upload.
	SHA256   string
	Complete bool
}

// Volume purposes recorded in the mark.
const (
	purposeDisk        = "disk"
	purposeIgnition    = "ignition"
	purposeConfigDrive = "config-drive"
	purposeBase        = "base"
)

// nodeMark is the mark a node's domain carries.
func nodeMark(spec *platform.Spec, m platform.Machine, pool poolInfo, complete bool) Mark {
	v := volumesFor(spec.Image.Flavor, m)
	mk := Mark{InfraID: spec.InfraID, Kind: kindNode, Node: m.Node, Role: string(m.Role), Complete: complete,
		Volumes: []MarkVolume{{Pool: pool.Name, Name: v.Disk, Purpose: purposeDisk}}}
	if v.Ignition != "" {
		mk.Volumes = append(mk.Volumes, MarkVolume{Pool: pool.Name, Name: v.Ignition, Purpose: purposeIgnition})
	}
	if v.ConfigDrive != "" {
		mk.Volumes = append(mk.Volumes, MarkVolume{Pool: pool.Name, Name: v.ConfigDrive, Purpose: purposeConfigDrive})
	}
	return mk
}

// xmlMarkOut is the encoding form, with a literal prefix so that the element
// reads the same in `virsh dumpxml` as it does here.
type xmlMarkOut struct {
	XMLName  xml.Name    `xml:"appliance:machine"`
	NS       string      `xml:"xmlns:appliance,attr"`
	InfraID  string      `xml:"infraID,attr"`
	Kind     string      `xml:"kind,attr"`
	Node     string      `xml:"node,attr,omitempty"`
	Role     string      `xml:"role,attr,omitempty"`
	Complete bool        `xml:"complete,attr"`
	Volumes  []xmlVolOut `xml:"appliance:volume"`
}

type xmlVolOut struct {
	Pool     string `xml:"pool,attr"`
	Name     string `xml:"name,attr"`
	Purpose  string `xml:"purpose,attr"`
	SHA256   string `xml:"sha256,attr,omitempty"`
	Complete bool   `xml:"complete,attr,omitempty"`
}

// xmlMarkIn is the decoding form, matched by namespace whatever the prefix.
type xmlMarkIn struct {
	XMLName  xml.Name   `xml:"urn:appliance:provision:libvirt:1 machine"`
	InfraID  string     `xml:"infraID,attr"`
	Kind     string     `xml:"kind,attr"`
	Node     string     `xml:"node,attr"`
	Role     string     `xml:"role,attr"`
	Complete bool       `xml:"complete,attr"`
	Volumes  []xmlVolIn `xml:"urn:appliance:provision:libvirt:1 volume"`
}

type xmlVolIn struct {
	Pool     string `xml:"pool,attr"`
	Name     string `xml:"name,attr"`
	Purpose  string `xml:"purpose,attr"`
	SHA256   string `xml:"sha256,attr"`
	Complete bool   `xml:"complete,attr"`
}

// encodeMark renders m as the inner XML of a domain's <metadata>.
func encodeMark(m Mark) (string, error) {
	out := xmlMarkOut{NS: Namespace, InfraID: m.InfraID, Kind: m.Kind, Node: m.Node, Role: m.Role, Complete: m.Complete}
	for _, v := range m.Volumes {
		out.Volumes = append(out.Volumes, xmlVolOut(v))
	}
	b, err := xml.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("libvirt: encode metadata: %w", err)
	}
	return string(b), nil
}

// errNoMark says a domain's metadata holds no element of ours.
var errNoMark = errors.New("no appliance metadata")

// decodeMark finds our element in the inner XML of a domain's <metadata>
// (which may hold other namespaces' elements too).
func decodeMark(inner string) (Mark, error) {
	if strings.TrimSpace(inner) == "" {
		return Mark{}, errNoMark
	}
	// Wrap so that several top-level elements parse as one document.
	d := xml.NewDecoder(strings.NewReader("<metadata>" + inner + "</metadata>"))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return Mark{}, errNoMark
		}
		if err != nil {
			return Mark{}, fmt.Errorf("libvirt: parse metadata: %w", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Space != Namespace || se.Name.Local != "machine" {
			continue
		}
		var in xmlMarkIn
		if err := d.DecodeElement(&in, &se); err != nil {
			return Mark{}, fmt.Errorf("libvirt: parse metadata: %w", err)
		}
		if in.InfraID == "" {
			return Mark{}, fmt.Errorf("libvirt: parse metadata: %w: infraID is empty", errNoMark)
		}
		m := Mark{InfraID: in.InfraID, Kind: in.Kind, Node: in.Node, Role: in.Role, Complete: in.Complete}
		for _, v := range in.Volumes {
			m.Volumes = append(m.Volumes, MarkVolume(v))
		}
		return m, nil
	}
}

// markFromDomainXML reads the mark out of a full domain XML document
// without a full libvirtxml parse (List and Destroy read many domains).
func markFromDomainXML(doc string) (Mark, error) {
	var d struct {
		Metadata struct {
			Inner string `xml:",innerxml"`
		} `xml:"metadata"`
	}
	if err := xml.NewDecoder(bytes.NewReader([]byte(doc))).Decode(&d); err != nil {
		return Mark{}, fmt.Errorf("libvirt: parse domain XML: %w", err)
	}
	return decodeMark(d.Metadata.Inner)
}
