package httpserve

import (
	"net"
	"testing"
)

// A source is an IP address, IPv4-mapped IPv6 as IPv4; an IPv6 /64 is
// not one source (a node's pods share one).
func TestSourceOf(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.2:4000", "127.0.0.2"},
		{"[::ffff:10.0.0.7]:4000", "10.0.0.7"},
		{"[fd00:1:2:3:aaaa::1]:4000", "fd00:1:2:3:aaaa::1"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := sourceOf(a).String(); got != tc.want {
			t.Errorf("sourceOf(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}
