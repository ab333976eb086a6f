package kubevirt

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"appliance/platform"
)

func TestPrepareImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	golden := func(ns, sha string, phase cdiv1.DataVolumePhase, progress string) *cdiv1.DataVolume {
		spec := testSpec()
		spec.Image.SHA256 = sha
		dv := BuildGoldenDataVolume(spec, Options{Namespace: ns, StorageClass: "fast"}, 16)
		dv.Status.Phase = phase
		dv.Status.Progress = cdiv1.DataVolumeProgress(progress)
		return dv
	}
	tests := []struct {
		name         string
		objs         func(ns string) []client.Object
		mut          func(*platform.Spec)
		wantSHA      string // annotation on the DataVolume after, "" for none
		wantReplaced bool
		wantProgress [2]int64
	}{
		{"creates", nil, nil, "ab12cd34", false, [2]int64{-1, -1}},
		{"reuses import in progress", func(ns string) []client.Object {
			return []client.Object{golden(ns, "ab12cd34", cdiv1.ImportInProgress, "25.00%")}
		}, nil, "ab12cd34", false, [2]int64{1 << 28, 1 << 30}},
		{"reuses finished import", func(ns string) []client.Object {
			return []client.Object{golden(ns, "ab12cd34", cdiv1.Succeeded, "100.0%")}
		}, nil, "ab12cd34", false, [2]int64{1 << 30, 1 << 30}},
		{"replaces other image", func(ns string) []client.Object {
			return []client.Object{golden(ns, "0ld", cdiv1.Succeeded, "100.0%")}
		}, nil, "ab12cd34", true, [2]int64{-1, -1}},
		{"same digest from another mirror is kept", func(ns string) []client.Object {
			return []client.Object{golden(ns, "ab12cd34", cdiv1.Succeeded, "100.0%")}
		}, func(s *platform.Spec) { s.Image.URL = "https://mirror.example.org/rhcos.qcow2" }, "ab12cd34", false, [2]int64{1 << 30, 1 << 30}},
		{"replaces failed import", func(ns string) []client.Object {
			return []client.Object{golden(ns, "ab12cd34", cdiv1.Failed, "")}
		}, nil, "ab12cd34", true, [2]int64{-1, -1}},
		{"reuses PVC left by a collected DataVolume", func(ns string) []client.Object {
			return []client.Object{testPVC(ns, "ocp4-x7k2p-rhcos", map[string]string{LabelInfraID: testInfraID})}
		}, nil, "", false, [2]int64{-1, -1}},
		{"container disk needs none", nil, func(s *platform.Spec) { s.Image = platform.Image{ContainerDisk: "quay.io/x/rhcos:1"} }, "", false, [2]int64{-1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			if tt.objs != nil {
				seed(t, tt.objs(ns)...)
			}
			p, _ := newProvider(t, ns, nil)
			spec := testSpec()
			if tt.mut != nil {
				tt.mut(spec)
			}
			prog := [2]int64{-1, -1}
			if err := p.PrepareImage(ctx, spec, func(d, tot int64) { prog = [2]int64{d, tot} }); err != nil {
				t.Fatal(err)
			}
			if prog != tt.wantProgress {
				t.Errorf("progress %v, want %v", prog, tt.wantProgress)
			}
			dv := &cdiv1.DataVolume{}
			err := kube.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-rhcos"}, dv)
			if tt.wantSHA == "" {
				if err == nil {
					t.Errorf("unexpected DataVolume %+v", dv.ObjectMeta)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if dv.Annotations[AnnotationImageSHA256] != tt.wantSHA {
				t.Errorf("sha annotation %q", dv.Annotations[AnnotationImageSHA256])
			}
			if replaced := dv.Status.Phase == ""; replaced != tt.wantReplaced && tt.objs != nil {
				t.Errorf("replaced = %v, want %v", replaced, tt.wantReplaced)
			}
		})
	}

	t.Run("waits for the import", func(t *testing.T) {
		t.Parallel()
		// Waiting for the import follows CDI's progress to the end.
		ns := newNamespace(t)
		running := golden(ns, "ab12cd34", cdiv1.ImportInProgress, "10.0%")
		seed(t, running)
		pw, _ := newProvider(t, ns, func(o *Options) { o.WaitForImport = true })
		done := make(chan error, 1)
		go func() {
			time.Sleep(100 * time.Millisecond)
			dv := &cdiv1.DataVolume{}
			err := kube.c.Get(ctx, client.ObjectKeyFromObject(running), dv)
			if err == nil {
				dv.Status.Phase, dv.Status.Progress = cdiv1.Succeeded, "100.0%"
				err = kube.c.Status().Update(ctx, dv)
			}
			done <- err
		}()
		var seen []int64
		if err := pw.PrepareImage(ctx, testSpec(), func(d, _ int64) { seen = append(seen, d) }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(seen) < 2 || seen[0] != (1<<30)/10 || seen[len(seen)-1] != 1<<30 {
			t.Errorf("progress %v", seen)
		}
	})

	t.Run("no password in logs", func(t *testing.T) {
		t.Parallel()
		// A mirror password in the URL stays out of logs and annotations.
		ns := newNamespace(t)
		p, logs := newProvider(t, ns, nil)
		spec := testSpec()
		spec.Image.URL = "https://user:hunter2-mirror@mirror.example.org/rhcos.qcow2"
		if err := p.PrepareImage(ctx, spec, nil); err != nil {
			t.Fatal(err)
		}
		dv := &cdiv1.DataVolume{}
		if err := kube.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ocp4-x7k2p-rhcos"}, dv); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs.String(), "hunter2") || strings.Contains(dv.Annotations[AnnotationImageSource], "hunter2") {
			t.Errorf("password leaked: %s / %v", logs.String(), dv.Annotations)
		}
		spec.Image.URL = ""
		if err := p.PrepareImage(ctx, spec, nil); err == nil || !strings.Contains(err.Error(), "no URL") {
			t.Errorf("no URL: %v", err)
		}
	})
}

// qcow2Header is the first 32 bytes of a qcow2 v3 image of size bytes.
func qcow2Header(size uint64) []byte {
	h := make([]byte, 32)
	copy(h, "QFI\xfb")
	h[7] = 3
	for i := 0; i < 8; i++ {
		h[31-i] = byte(size >> (8 * i))
	}
	return h
}

func TestGoldenSize(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "rhcos.qcow2")
	if err := os.WriteFile(q, qcow2Header(16<<30), 0o644); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.qcow2")
	if err := os.WriteFile(junk, []byte("not an image at all, but long enough to read"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		img  platform.Image
		opt  int
		want int
	}{
		{"qcow2 header", platform.Image{Path: q, Format: "qcow2"}, 0, 17},
		{"option wins", platform.Image{Path: q, Format: "qcow2"}, 40, 40},
		{"raw size rounds up", platform.Image{Format: "raw", Size: 10<<30 + 1}, 0, 12},
		{"unreadable qcow2", platform.Image{Path: junk, Format: "qcow2"}, 0, 17},
		{"missing file", platform.Image{Path: filepath.Join(dir, "none"), Format: "qcow2"}, 0, 17},
		{"URL only", platform.Image{URL: "https://x/rhcos.qcow2"}, 0, 17},
	}
	for _, tt := range tests {
		spec := &platform.Spec{Image: tt.img}
		if got := goldenSizeGiB(spec, Options{ImageDiskGiB: tt.opt}); got != tt.want {
			t.Errorf("%s: %d GiB, want %d", tt.name, got, tt.want)
		}
	}
}

func FuzzQcow2VirtualSize(f *testing.F) {
	f.Add(qcow2Header(16 << 30))
	f.Add([]byte("QFI\xfb"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := qcow2VirtualSize(b)
		if err == nil && (n <= 0 || n > 1<<50) {
			t.Fatalf("size %d accepted", n)
		}
	})
}
