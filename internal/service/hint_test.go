package service

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestHint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, busy := net.Listen("tcp", ln.Addr().String())
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("lb: api: listen %s: %w", ln.Addr(), busy), "another program holds that port"},
		{fmt.Errorf("vrrp: open IPv4 raw socket on eth0: %w", &os.SyscallError{Syscall: "socket", Err: syscall.EPERM}), "CAP_NET_RAW"},
		{fmt.Errorf("dns: listen :53: %w", syscall.EACCES), "CAP_NET_BIND_SERVICE"},
		{errors.New("config: bad"), ""},
	}
	for _, c := range cases {
		got := Hint(c.err)
		if !errors.Is(got, c.err) {
			t.Errorf("Hint(%v) lost the cause", c.err)
		}
		if c.want == "" && got.Error() != c.err.Error() {
			t.Errorf("Hint(%v) = %v, want it unchanged", c.err, got)
		}
		if c.want != "" && !strings.Contains(got.Error(), c.want) {
			t.Errorf("Hint(%v) = %v, want it to say %q", c.err, got, c.want)
		}
	}
	if Hint(nil) != nil {
		t.Error("Hint(nil) is not nil")
	}
}
