package bootstrap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/coreos/vcontext/path"
)

// pathAtOffset is the JSON path ("$.storage.files.0.mode") of the value of
// raw that ends at or after byte offset off: where a decoder error at off
// lies, for errors that carry only an offset.
func pathAtOffset(raw []byte, off int64) string {
	type frame struct {
		arr     bool
		idx     int
		key     string
		wantKey bool
	}
	var stack []frame
	render := func() string {
		var b strings.Builder
		b.WriteString("$")
		for _, f := range stack {
			switch {
			case f.arr:
				b.WriteString("." + strconv.Itoa(f.idx))
			case !f.wantKey:
				b.WriteString("." + f.key)
			}
		}
		return b.String()
	}
	done := func() { // a value of the innermost container is complete
		if n := len(stack); n > 0 {
			if stack[n-1].arr {
				stack[n-1].idx++
			} else {
				stack[n-1].wantKey = true
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return render()
		}
		n := len(stack)
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			if dec.InputOffset() >= off {
				return render()
			}
			stack = stack[:n-1]
			done()
			continue
		}
		if n > 0 && !stack[n-1].arr && stack[n-1].wantKey {
			stack[n-1].key, stack[n-1].wantKey = fmt.Sprint(tok), false
			continue
		}
		if dec.InputOffset() >= off {
			return render()
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{arr: true})
		default:
			done()
		}
	}
}

// lineCol turns a byte offset into a 1-based line and column.
func lineCol(raw []byte, off int64) (int, int) {
	if off > int64(len(raw)) {
		off = int64(len(raw))
	}
	before := raw[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// syntaxError names where raw stops being JSON, or is nil.
func syntaxError(raw []byte) error {
	var v any
	err := json.Unmarshal(raw, &v)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return nil
	}
	l, c := lineCol(raw, se.Offset)
	return fmt.Errorf("not JSON: %s: %v (line %d col %d)", pathAtOffset(raw, se.Offset), se, l, c)
}

// describeAt names the file, unit or user an error's path lies in, from the
// config itself: `path "/etc/x"`, or "" when there is none.
func describeAt(raw []byte, ctx path.ContextPath) string {
	var cur any
	if json.Unmarshal(raw, &cur) != nil {
		return ""
	}
	what := ""
	for _, e := range ctx.Path {
		if m, ok := cur.(map[string]any); ok {
			for _, k := range []string{"path", "name"} {
				if s, ok := m[k].(string); ok {
					what = fmt.Sprintf("%s %q", k, s)
				}
			}
		}
		switch e := e.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return what
			}
			cur = m[e]
		case int:
			a, ok := cur.([]any)
			if !ok || e < 0 || e >= len(a) {
				return what
			}
			cur = a[e]
		default:
			return what
		}
	}
	if m, ok := cur.(map[string]any); ok {
		for _, k := range []string{"path", "name"} {
			if s, ok := m[k].(string); ok {
				what = fmt.Sprintf("%s %q", k, s)
			}
		}
	}
	return what
}
