package ovirt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	ovirtclient "github.com/ovirt/go-ovirt-client/v3"
	"golang.org/x/sync/errgroup"

	"appliance/internal/cluster"
	"appliance/platform"
)

const infraID = "ocp4-x7k2p"

// fakeQCOW2 writes a small qcow2-looking file whose header claims a 16 GiB
// virtual size (all the mock reads) and returns the image description.
func fakeQCOW2(t testing.TB, tag string) platform.Image {
	t.Helper()
	data := make([]byte, 256<<10)
	copy(data, "QFI\xfb")
	binary.BigEndian.PutUint32(data[4:], 3)
	binary.BigEndian.PutUint64(data[24:], 16<<30)
	copy(data[4096:], tag)
	p := filepath.Join(t.TempDir(), "rhcos-openstack.qcow2")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return platform.Image{Path: p, Format: "qcow2", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)),
		Flavor: platform.FlavorOpenStack}
}

func testSpec(t testing.TB, workers int) *platform.Spec {
	s := &platform.Spec{InfraID: infraID, ClusterName: "ocp4", BaseDomain: "example.com", Image: fakeQCOW2(t, "v1")}
	add := func(node string, role cluster.Role, cpus, mem, disk, i int) {
		s.Machines = append(s.Machines, platform.Machine{
			Name: infraID + "-" + node, Node: node, Role: role, CPUs: cpus, MemoryMiB: mem, DiskGiB: disk,
			MAC:      net.HardwareAddr{0x02, 0x7e, 0, 0, byte(i >> 8), byte(i)},
			Ignition: []byte(fmt.Sprintf(`{"ignition":{"version":"3.2.0"},"x":%q}`, node)),
		})
	}
	add("bootstrap", cluster.RoleBootstrap, 4, 8192, 120, 9)
	for i := range 3 {
		add(fmt.Sprintf("master-%d", i), cluster.RoleMaster, 4, 16384, 120, 0x10+i)
	}
	for i := range workers {
		add(fmt.Sprintf("worker-%d", i), cluster.RoleWorker, 2, 8192, 16, 0x100+i) // 16 GiB: no resize needed
	}
	return s
}

// noResize sizes every disk like the image so no resize is needed: the mock
// holds its global lock for a second per resize, which slows tests that
// are about something else.
func noResize(s *platform.Spec) *platform.Spec {
	for i := range s.Machines {
		s.Machines[i].DiskGiB = 16
	}
	return s
}

type env struct {
	mock ovirtclient.MockClient
	p    *Provider
	opts Options
}

// skipUnderRace: the mock hands out its live objects and its own
// goroutines later change their status (template unlock, disk unlock, VM
// power), so -race reports races between the mock and any reader.
func skipUnderRace(t testing.TB) {
	if raceDetector {
		t.Skip("go-ovirt-client's mock races with its callers by design (see skipUnderRace)")
	}
}

func newEnv(t testing.TB, mod func(*Options)) *env {
	t.Helper()
	skipUnderRace(t)
	mock := ovirtclient.NewMock()
	cl, err := mock.ListClusters()
	if err != nil {
		t.Fatal(err)
	}
	sds, _ := mock.ListStorageDomains()
	profiles, _ := mock.ListVNICProfiles()
	opts := Options{ClusterID: string(cl[0].ID()), StorageDomainID: string(sds[0].ID()),
		VNICProfileID: string(profiles[0].ID()), PollInterval: 50 * time.Millisecond, WaitTimeout: time.Minute}
	if mod != nil {
		mod(&opts)
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("OVIRT_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	p, err := NewWithClient(context.Background(), mock, opts, log)
	if err != nil {
		t.Fatal(err)
	}
	return &env{mock: mock, p: p, opts: opts}
}

// apply is what the engine does: image, then every Create in parallel.
func apply(ctx context.Context, p platform.Provider, spec *platform.Spec, workers int, stage func(m platform.Machine, s string)) error {
	if err := p.PrepareImage(ctx, spec, nil); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, m := range spec.Machines {
		g.Go(func() error {
			return p.Create(gctx, spec, m, func(s string) {
				if stage != nil {
					stage(m, s)
				}
			})
		})
	}
	return g.Wait()
}

// inventory counts everything in the mock, to prove re-runs add nothing.
type inventory struct {
	VMs, Templates, Disks, NICs, Tags, Groups, VMTags, GroupMembers int
}

func (e *env) inventory(t *testing.T) inventory {
	t.Helper()
	var inv inventory
	vms, _ := e.mock.ListVMs()
	inv.VMs = len(vms)
	for _, vm := range vms {
		nics, _ := e.mock.ListNICs(vm.ID())
		inv.NICs += len(nics)
		tags, _ := e.mock.ListVMTags(vm.ID())
		inv.VMTags += len(tags)
	}
	tpls, _ := e.mock.ListTemplates()
	inv.Templates = len(tpls)
	disks, _ := e.mock.ListDisks()
	inv.Disks = len(disks)
	tags, _ := e.mock.ListTags()
	inv.Tags = len(tags)
	groups, _ := e.mock.ListAffinityGroups(ovirtclient.ClusterID(e.opts.ClusterID))
	inv.Groups = len(groups)
	for _, g := range groups {
		inv.GroupMembers += len(g.VMIDs())
	}
	return inv
}

// foreign creates objects that look like the cluster's but are not ours.
func (e *env) foreign(t *testing.T) {
	t.Helper()
	cid := ovirtclient.ClusterID(e.opts.ClusterID)
	blank, _ := e.mock.GetBlankTemplate()
	for _, n := range []string{infraID + "-master-0-old", "ocp4-x7k2q-master-0", infraID + "-rhcos-builder-x"} {
		if _, err := e.mock.CreateVM(cid, blank.ID(), n, ovirtclient.NewCreateVMParams().MustWithDescription("not appliance-provision infraID="+infraID)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.mock.CreateTag(infraID+"-old", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mock.CreateAffinityGroup(cid, infraID+"-controlplane-old", ovirtclient.CreateAffinityGroupParams().MustWithDescription("hand made")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mock.CreateDisk(ovirtclient.StorageDomainID(e.opts.StorageDomainID), ovirtclient.ImageFormatRaw, 1<<20,
		ovirtclient.CreateDiskParams().MustWithAlias(imageAlias(infraID)+"-old")); err != nil {
		t.Fatal(err)
	}
}
