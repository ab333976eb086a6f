package ovirt

import (
	"fmt"
	"io"
	"net"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
)

// engine is the part of the oVirt API the provider uses. The real client
// satisfies it directly; the in-memory mock goes through mockEngine, which
// makes it behave like an engine where it does not.
type engine interface {
	ListTags(retries ...ovirtclient.RetryStrategy) ([]ovirtclient.Tag, error)
	CreateTag(name string, params ovirtclient.CreateTagParams, retries ...ovirtclient.RetryStrategy) (ovirtclient.Tag, error)
	RemoveTag(id ovirtclient.TagID, retries ...ovirtclient.RetryStrategy) error

	ListVMs(retries ...ovirtclient.RetryStrategy) ([]ovirtclient.VM, error)
	SearchVMs(params ovirtclient.VMSearchParameters, retries ...ovirtclient.RetryStrategy) ([]ovirtclient.VM, error)
	GetVM(id ovirtclient.VMID, retries ...ovirtclient.RetryStrategy) (ovirtclient.VM, error)
	GetVMByName(name string, retries ...ovirtclient.RetryStrategy) (ovirtclient.VM, error)
	CreateVM(clusterID ovirtclient.ClusterID, templateID ovirtclient.TemplateID, name string, params ovirtclient.OptionalVMParameters, retries ...ovirtclient.RetryStrategy) (ovirtclient.VM, error)
	UpdateVM(id ovirtclient.VMID, params ovirtclient.UpdateVMParameters, retries ...ovirtclient.RetryStrategy) (ovirtclient.VM, error)
	StartVM(id ovirtclient.VMID, retries ...ovirtclient.RetryStrategy) error
	StopVM(id ovirtclient.VMID, force bool, retries ...ovirtclient.RetryStrategy) error
	RemoveVM(id ovirtclient.VMID, retries ...ovirtclient.RetryStrategy) error
	AddTagToVM(id ovirtclient.VMID, tagID ovirtclient.TagID, retries ...ovirtclient.RetryStrategy) error
	ListVMTags(id ovirtclient.VMID, retries ...ovirtclient.RetryStrategy) ([]ovirtclient.Tag, error)
	GetVMIPAddresses(id ovirtclient.VMID, params ovirtclient.VMIPSearchParams, retries ...ovirtclient.RetryStrategy) (map[string][]net.IP, error)

	CreateNIC(vmid ovirtclient.VMID, vnicProfileID ovirtclient.VNICProfileID, name string, params ovirtclient.OptionalNICParameters, retries ...ovirtclient.RetryStrategy) (ovirtclient.NIC, error)
	ListNICs(vmid ovirtclient.VMID, retries ...ovirtclient.RetryStrategy) ([]ovirtclient.NIC, error)
	UpdateNIC(vmid ovirtclient.VMID, nicID ovirtclient.NICID, params ovirtclient.UpdateNICParameters, retries ...ovirtclient.RetryStrategy) (ovirtclient.NIC, error)

	ListDiskAttachments(vmID ovirtclient.VMID, retries ...ovirtclient.RetryStrategy) ([]ovirtclient.DiskAttachment, error)
	CreateDiskAttachment(vmID ovirtclient.VMID, diskID ovirtclient.DiskID, diskInterface ovirtclient.DiskInterface, params ovirtclient.CreateDiskAttachmentOptionalParams, retries ...ovirtclient.RetryStrategy) (ovirtclient.DiskAttachment, error)
	GetDisk(id ovirtclient.DiskID, retries ...ovirtclient.RetryStrategy) (ovirtclient.Disk, error)
	ListDisks(retries ...ovirtclient.RetryStrategy) ([]ovirtclient.Disk, error)
	UpdateDisk(id ovirtclient.DiskID, params ovirtclient.UpdateDiskParameters, retries ...ovirtclient.RetryStrategy) (ovirtclient.Disk, error)
	RemoveDisk(id ovirtclient.DiskID, retries ...ovirtclient.RetryStrategy) error
	StartUploadToNewDisk(storageDomainID ovirtclient.StorageDomainID, format ovirtclient.ImageFormat, size uint64, params ovirtclient.CreateDiskOptionalParameters, reader io.ReadSeekCloser, retries ...ovirtclient.RetryStrategy) (ovirtclient.UploadImageProgress, error)

	GetBlankTemplate(retries ...ovirtclient.RetryStrategy) (ovirtclient.Template, error)
	GetTemplateByName(name string, retries ...ovirtclient.RetryStrategy) (ovirtclient.Template, error)
	GetTemplate(id ovirtclient.TemplateID, retries ...ovirtclient.RetryStrategy) (ovirtclient.Template, error)
	CreateTemplate(vmID ovirtclient.VMID, name string, params ovirtclient.OptionalTemplateCreateParameters, retries ...ovirtclient.RetryStrategy) (ovirtclient.Template, error)
	RemoveTemplate(id ovirtclient.TemplateID, retries ...ovirtclient.RetryStrategy) error
	ListTemplateDiskAttachments(id ovirtclient.TemplateID, retries ...ovirtclient.RetryStrategy) ([]ovirtclient.TemplateDiskAttachment, error)

	ListAffinityGroups(clusterID ovirtclient.ClusterID, retries ...ovirtclient.RetryStrategy) ([]ovirtclient.AffinityGroup, error)
	GetAffinityGroup(clusterID ovirtclient.ClusterID, id ovirtclient.AffinityGroupID, retries ...ovirtclient.RetryStrategy) (ovirtclient.AffinityGroup, error)
	CreateAffinityGroup(clusterID ovirtclient.ClusterID, name string, params ovirtclient.CreateAffinityGroupOptionalParams, retries ...ovirtclient.RetryStrategy) (ovirtclient.AffinityGroup, error)
	AddVMToAffinityGroup(clusterID ovirtclient.ClusterID, vmID ovirtclient.VMID, agID ovirtclient.AffinityGroupID, retries ...ovirtclient.RetryStrategy) error
	RemoveAffinityGroup(clusterID ovirtclient.ClusterID, id ovirtclient.AffinityGroupID, retries ...ovirtclient.RetryStrategy) error
}

var _ engine = ovirtclient.Client(nil)

// mockEngine papers over the in-memory mock's departures from a real
// engine that would otherwise break correct code:
//   - NIC names are unique across all VMs (an engine scopes them per VM), so
//     the second VM's "nic1" is refused: the name is suffixed with the VM ID.
//   - Removing a template leaves its disks behind (an engine removes them):
//     they are removed here.
type mockEngine struct {
	ovirtclient.Client
}

func (m mockEngine) CreateNIC(vmid ovirtclient.VMID, profile ovirtclient.VNICProfileID, name string, params ovirtclient.OptionalNICParameters, retries ...ovirtclient.RetryStrategy) (ovirtclient.NIC, error) {
	return m.Client.CreateNIC(vmid, profile, fmt.Sprintf("%s-%s", name, vmid), params, retries...)
}

func (m mockEngine) RemoveTemplate(id ovirtclient.TemplateID, retries ...ovirtclient.RetryStrategy) error {
	atts, err := m.Client.ListTemplateDiskAttachments(id, retries...)
	if err != nil {
		return err
	}
	if err := m.Client.RemoveTemplate(id, retries...); err != nil {
		return err
	}
	for _, a := range atts {
		d, err := m.Client.GetDisk(a.DiskID(), retries...)
		if err != nil {
			continue
		}
		for _, sd := range d.StorageDomainIDs() {
			_ = m.Client.RemoveDiskFromStorageDomain(sd, d.ID(), retries...)
		}
	}
	return nil
}
