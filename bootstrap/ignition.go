package bootstrap

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/coreos/ignition/v2/config/util"
	v30 "github.com/coreos/ignition/v2/config/v3_0"
	t30 "github.com/coreos/ignition/v2/config/v3_0/types"
	v31 "github.com/coreos/ignition/v2/config/v3_1"
	t31 "github.com/coreos/ignition/v2/config/v3_1/types"
	v32 "github.com/coreos/ignition/v2/config/v3_2"
	t32 "github.com/coreos/ignition/v2/config/v3_2/types"
	v33 "github.com/coreos/ignition/v2/config/v3_3"
	t33 "github.com/coreos/ignition/v2/config/v3_3/types"
	v34 "github.com/coreos/ignition/v2/config/v3_4"
	t34 "github.com/coreos/ignition/v2/config/v3_4/types"
	v35 "github.com/coreos/ignition/v2/config/v3_5"
	t35 "github.com/coreos/ignition/v2/config/v3_5/types"
	v36 "github.com/coreos/ignition/v2/config/v3_6"
	t36 "github.com/coreos/ignition/v2/config/v3_6/types"
	"github.com/coreos/vcontext/path"
	"github.com/coreos/vcontext/report"
	"github.com/coreos/vcontext/tree"
)

// Versions are the Ignition spec versions Merge reads and writes, each in
// its own types: every stable 3.x of github.com/coreos/ignition/v2.
var Versions = []string{"3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0", "3.6.0"}

// IgnitionError is a config Ignition's own parser or validator refused; it
// names the file and each JSON path at fault.
type IgnitionError struct {
	File    string
	Err     error          // the module's error (not a config, invalid, unsupported version)
	Entries []report.Entry // the validator's findings, with their paths
	// Config is the document the entries' paths are in (the input, or the
	// merged output when that is what the module refused).
	Config []byte
}

func (e *IgnitionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v", e.File, e.Err)
	for _, en := range e.Entries {
		if !en.Kind.IsFatal() {
			continue
		}
		b.WriteString("\n  ")
		b.WriteString(entryString(en, e.Config))
	}
	return b.String()
}

func (e *IgnitionError) Unwrap() error { return e.Err }

// entryString is `$.storage.files.3.mode (path "/etc/x"): message (line 1
// col 80)`: the JSON path, the entry it is in, the module's message.
func entryString(en report.Entry, raw []byte) string {
	at := en.Context.String()
	if en.Context.Len() == 0 && en.Marker.StartP != nil {
		// Decoding errors carry an offset only.
		at = pathAtOffset(raw, en.Marker.StartP.Index)
	} else if what := describeAt(raw, en.Context); what != "" {
		at += " (" + what + ")"
	}
	s := at + ": " + en.Message
	if p := en.Marker.StartP; p != nil && p.Line > 0 {
		s += fmt.Sprintf(" (line %d col %d)", p.Line, p.Column)
	}
	return s
}

// Merged is the result of Merge.
type Merged struct {
	Config  []byte // the config, at the input's version
	Version string
	// Warnings are the parser's non-fatal findings on the input, with their
	// paths; an unknown key is one, and is not carried into Config.
	Warnings []string
}

// Merge puts files into the Ignition config raw, keeping its spec version:
// its entries at OwnedPaths are dropped, files appended, everything else
// kept as the module parsed it. The result is checked by parsing it again.
// name is the file's name, for errors.
func Merge(name string, raw []byte, files []File) (*Merged, error) {
	if err := syntaxError(raw); len(raw) > 0 && err != nil {
		return nil, &IgnitionError{File: name, Err: err}
	}
	ver, rpt, err := util.GetConfigVersion(raw)
	if err != nil {
		return nil, &IgnitionError{File: name, Err: err, Entries: rpt.Entries, Config: raw}
	}
	var m func([]byte, []File) ([]byte, report.Report, error)
	switch {
	case ver.Major != 3 || ver.PreRelease != "" || ver.Patch != 0:
	case ver.Minor == 0:
		m = c30.merge
	case ver.Minor == 1:
		m = c31.merge
	case ver.Minor == 2:
		m = c32.merge
	case ver.Minor == 3:
		m = c33.merge
	case ver.Minor == 4:
		m = c34.merge
	case ver.Minor == 5:
		m = c35.merge
	case ver.Minor == 6:
		m = c36.merge
	}
	if m == nil {
		return nil, &IgnitionError{File: name, Err: fmt.Errorf("$.ignition.version: %s is not a spec version this build writes (want one of %s)", ver.String(), strings.Join(Versions, ", "))}
	}
	out, rpt, err := m(raw, files)
	if err != nil {
		doc, entries := raw, rpt.Entries
		if errors.Is(err, errReparse) {
			// Lines and columns would point into a document the user
			// never sees; the paths and the entries' own paths remain.
			doc, entries = out, nil
			for _, en := range rpt.Entries {
				en.Marker = tree.Marker{}
				entries = append(entries, en)
			}
		}
		return nil, &IgnitionError{File: name, Err: err, Entries: entries, Config: doc}
	}
	res := &Merged{Config: out, Version: ver.String()}
	for _, en := range rpt.Entries {
		if !en.Kind.IsFatal() {
			w := name + ": " + entryString(en, raw)
			if strings.HasPrefix(en.Message, "unused key") {
				w += " (Ignition ignores it; the edited file leaves it out)"
			}
			res.Warnings = append(res.Warnings, w)
		}
	}
	return res, nil
}

// dataURL carries contents inside the config: nothing to fetch at boot.
func dataURL(b []byte) string { return "data:;base64," + base64.StdEncoding.EncodeToString(b) }

// codec is one spec version's types: C its Config, F its File.
type codec[C, F any] struct {
	parse func([]byte) (C, report.Report, error)
	files func(*C) *[]F
	path  func(*F) string
	file  func(File) F
	// replaced reports whether the config is a pointer that replaces
	// itself with another (ignition.config.replace): Ignition then applies
	// none of its own entries.
	replaced func(*C) bool
}

// errReplaced is the warning for a replacing pointer config.
var errReplaced = errors.New("this config is replaced by the one it points to, so Ignition applies none of its own files, the appliance's included; they reach the node only through that config (e.g. as MachineConfigs from `appliance manifests`)")

// errReparse marks an output the module refused: a conflict between our
// files and the config's (e.g. a directory at one of our paths).
var errReparse = errors.New("the appliance's files clash with an entry of this config at the same path (paths below are in the merged config; remove or move the config's own entry)")

func (c codec[C, F]) merge(raw []byte, files []File) ([]byte, report.Report, error) {
	cfg, rpt, err := c.parse(raw)
	if err != nil {
		return nil, rpt, err
	}
	if len(files) > 0 && c.replaced(&cfg) {
		rpt.AddOnWarn(path.New("json", "ignition", "config", "replace", "source"), errReplaced)
	}
	list := c.files(&cfg)
	var kept []F
	for i := range *list {
		if !Owned(c.path(&(*list)[i])) {
			kept = append(kept, (*list)[i])
		}
	}
	for _, f := range files {
		kept = append(kept, c.file(f))
	}
	*list = kept
	out, err := json.Marshal(cfg)
	if err != nil {
		return nil, rpt, err
	}
	if _, r2, err := c.parse(out); err != nil {
		return out, r2, errReparse
	}
	return out, rpt, nil
}

// Strip is raw's config without its entries at OwnedPaths, marshalled by
// the module's types: what Merge must leave untouched, for comparing.
func Strip(raw []byte) ([]byte, error) {
	m, err := Merge("config", raw, nil)
	if err != nil {
		return nil, err
	}
	return m.Config, nil
}

// One codec per spec version. The File types differ only by package (3.0's
// contents are FileContents, later ones Resource), hence the repetition.
var (
	c30 = codec[t30.Config, t30.File]{
		parse:    v30.Parse,
		files:    func(c *t30.Config) *[]t30.File { return &c.Storage.Files },
		path:     func(f *t30.File) string { return f.Path },
		replaced: func(c *t30.Config) bool { return c.Ignition.Config.Replace.Source != nil },
		file: func(f File) t30.File {
			return t30.File{
				Node:          t30.Node{Path: f.Path, Overwrite: ptr(true)},
				FileEmbedded1: t30.FileEmbedded1{Mode: ptr(f.Mode), Contents: t30.FileContents{Source: ptr(dataURL(f.Contents))}},
			}
		},
	}
	c31 = codec[t31.Config, t31.File]{
		parse:    v31.Parse,
		files:    func(c *t31.Config) *[]t31.File { return &c.Storage.Files },
		path:     func(f *t31.File) string { return f.Path },
		replaced: func(c *t31.Config) bool { return c.Ignition.Config.Replace.Source != nil },
		file: func(f File) t31.File {
			return t31.File{
				Node:          t31.Node{Path: f.Path, Overwrite: ptr(true)},
				FileEmbedded1: t31.FileEmbedded1{Mode: ptr(f.Mode), Contents: t31.Resource{Source: ptr(dataURL(f.Contents))}},
			}
		},
	}
	c32 = codec[t32.Config, t32.File]{
		parse:    v32.Parse,
		files:    func(c *t32.Config) *[]t32.File { return &c.Storage.Files },
		path:     func(f *t32.File) string { return f.Path },
		replaced: func(c *t32.Config) bool { return c.Ignition.Config.Replace.Source != nil },
		file: func(f File) t32.File {
			return t32.File{
				Node:          t32.Node{Path: f.Path, Overwrite: ptr(true)},
				FileEmbedded1: t32.FileEmbedded1{Mode: ptr(f.Mode), Contents: t32.Resource{Source: ptr(dataURL(f.Contents))}},
			}
		},
	}
	c33 = codec[t33.Config, t33.File]{
		parse:    v33.Parse,
		files:    func(c *t33.Config) *[]t33.File { return &c.Storage.Files },
		path:     func(f *t33.File) string { return f.Path },
		replaced: func(c *t33.Config) bool { return c.Ignition.Config.Replace.Source != nil },
		file: func(f File) t33.File {
			return t33.File{
				Node:          t33.Node{Path: f.Path, Overwrite: ptr(true)},
				FileEmbedded1: t33.FileEmbedded1{Mode: ptr(f.Mode), Contents: t33.Resource{Source: ptr(dataURL(f.Contents))}},
			}
		},
	}
	c34 = codec[t34.Config, t34.File]{
		parse:    v34.Parse,
		files:    func(c *t34.Config) *[]t34.File { return &c.Storage.Files },
		path:     func(f *t34.File) string { return f.Path },
		replaced: func(c *t34.Config) bool { return c.Ignition.Config.Replace.Source != nil },
		file: func(f File) t34.File {
			return t34.File{
				Node:          t34.Node{Path: f.Path, Overwrite: ptr(true)},
				FileEmbedded1: t34.FileEmbedded1{Mode: ptr(f.Mode), Contents: t34.Resource{Source: ptr(dataURL(f.Contents))}},
			}
		},
	}
	c35 = codec[t35.Config, t35.File]{
		parse:    v35.Parse,
		files:    func(c *t35.Config) *[]t35.File { return &c.Storage.Files },
		path:     func(f *t35.File) string { return f.Path },
		replaced: func(c *t35.Config) bool { return c.Ignition.Config.Replace.Source != nil },
		file: func(f File) t35.File {
			return t35.File{
				Node:          t35.Node{Path: f.Path, Overwrite: ptr(true)},
				FileEmbedded1: t35.FileEmbedded1{Mode: ptr(f.Mode), Contents: t35.Resource{Source: ptr(dataURL(f.Contents))}},
			}
		},
	}
	c36 = codec[t36.Config, t36.File]{
		parse:    v36.Parse,
		files:    func(c *t36.Config) *[]t36.File { return &c.Storage.Files },
		path:     func(f *t36.File) string { return f.Path },
		replaced: func(c *t36.Config) bool { return c.Ignition.Config.Replace.Source != nil },
		file: func(f File) t36.File {
			return t36.File{
				Node:          t36.Node{Path: f.Path, Overwrite: ptr(true)},
				FileEmbedded1: t36.FileEmbedded1{Mode: ptr(f.Mode), Contents: t36.Resource{Source: ptr(dataURL(f.Contents))}},
			}
		},
	}
)
