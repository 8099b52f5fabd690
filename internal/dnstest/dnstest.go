// Package dnstest is a DNS server on loopback for tests: it answers A and
// AAAA queries for the names it is given, so that a test can make a name
// resolve to an address of its choice (127.0.0.1, say) and check what a
// client does with it after real DNS, without /etc/hosts.
package dnstest

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// Server answers DNS queries over UDP on 127.0.0.1.
type Server struct {
	conn  net.PacketConn
	mu    sync.Mutex
	names map[string][]netip.Addr
}

// Start starts a server that answers for names (name → addresses; names
// compare without case and without a trailing dot); every other name gets
// NXDOMAIN. It stops when t ends.
func Start(t testing.TB, names map[string][]netip.Addr) *Server {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{conn: conn, names: map[string][]netip.Addr{}}
	for n, a := range names {
		s.names[canon(n)] = a
	}
	go s.serve()
	t.Cleanup(func() { _ = conn.Close() })
	return s
}

// Set makes name resolve to addrs from now on.
func (s *Server) Set(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[canon(name)] = addrs
}

// Resolver returns a resolver that asks this server only.
func (s *Server) Resolver() *net.Resolver {
	addr := s.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

func canon(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

func (s *Server) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := s.answer(buf[:n]); resp != nil {
			_, _ = s.conn.WriteTo(resp, from)
		}
	}
}

// answer builds the response to one query, nil for a packet it cannot
// read.
func (s *Server) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	// The question: labels, then type and class.
	i := 12
	var labels []string
	for {
		if i >= len(q) {
			return nil
		}
		l := int(q[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i:i+l]))
		i += l
	}
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i:])
	question := q[12 : i+4]
	s.mu.Lock()
	addrs, known := s.names[canon(strings.Join(labels, "."))]
	s.mu.Unlock()

	resp := make([]byte, 12, 512)
	copy(resp, q[:2])                                // id
	flags := uint16(0x8000 | 0x0400 | 0x0080)        // response, authoritative, recursion available
	flags |= binary.BigEndian.Uint16(q[2:]) & 0x0100 // recursion desired, echoed
	if !known {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(resp[2:], flags)
	binary.BigEndian.PutUint16(resp[4:], 1)
	resp = append(resp, question...)
	var count uint16
	for _, a := range addrs {
		var rdata []byte
		switch {
		case qtype == 1 && a.Is4():
			b := a.As4()
			rdata = b[:]
		case qtype == 28 && a.Is6() && !a.Is4In6():
			b := a.As16()
			rdata = b[:]
		default:
			continue
		}
		resp = append(resp, 0xc0, 12) // the name: a pointer to the question's
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1) // IN
		resp = binary.BigEndian.AppendUint32(resp, 0) // TTL: none, ask again
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(rdata)))
		resp = append(resp, rdata...)
		count++
	}
	binary.BigEndian.PutUint16(resp[6:], count)
	return resp
}
