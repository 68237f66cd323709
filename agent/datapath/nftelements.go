package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nodeportlocal/npl/contract"
)

// elementWriter writes the element changes of the npl table of one family
// over a netlink socket it keeps open. A change through `nft -f -` costs a
// process, and one that deletes an element waits at the process's exit for
// the kernel to release what it deleted (the release of the netlink socket
// flushes nf_tables' deferred destruction: an RCU grace period, tens of ms
// on a busy node). That wait made a Pod replaced a slow write, on the new
// Pod's path when its addition waited behind the old Pod's removal. A kept
// socket is never released; the kernel frees the deleted elements in the
// background.
//
// The keys and values are the bytes nft writes for the map's types: in a
// concatenation each field takes a whole number of 32-bit registers, so
// inet_proto (1 byte) and inet_service (2 bytes, big endian) are padded to
// 4 bytes each, the address is 4 or 16.
type elementWriter struct {
	conn      *nftables.Conn
	nodePorts *nftables.Set
	hairpin   *nftables.Set
}

func newElementWriter(family contract.Family) (*elementWriter, error) {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("open a netlink socket to nftables: %w", err)
	}
	fam := nftables.TableFamilyIPv4
	if family == contract.FamilyIPv6 {
		fam = nftables.TableFamilyIPv6
	}
	table := &nftables.Table{Name: TableName, Family: fam}
	return &elementWriter{
		conn:      conn,
		nodePorts: &nftables.Set{Table: table, Name: nftMapNodePorts, IsMap: true},
		hairpin:   &nftables.Set{Table: table, Name: nftSetHairpin},
	}, nil
}

// write applies the element deletes, then adds, in one transaction, and
// returns the bytes of the elements it sent.
func (w *elementWriter) write(delMappings, addMappings []Mapping, delSources, addSources []netip.Addr) (int, error) {
	size := 0
	mappings := func(ms []Mapping, withValue bool) []nftables.SetElement {
		out := make([]nftables.SetElement, 0, len(ms))
		for _, m := range ms {
			e := nftables.SetElement{Key: mappingKey(m)}
			if withValue {
				e.Val, e.Comment = mappingValue(m), mappingComment(m)
			}
			size += len(e.Key) + len(e.Val) + len(e.Comment)
			out = append(out, e)
		}
		return out
	}
	sources := func(as []netip.Addr) []nftables.SetElement {
		out := make([]nftables.SetElement, 0, len(as))
		for _, a := range as {
			out = append(out, nftables.SetElement{Key: a.AsSlice()})
			size += a.BitLen() / 8
		}
		return out
	}
	var err error
	for _, op := range []struct {
		add  bool
		set  *nftables.Set
		elem []nftables.SetElement
	}{
		{false, w.nodePorts, mappings(delMappings, false)},
		{false, w.hairpin, sources(delSources)},
		{true, w.nodePorts, mappings(addMappings, true)},
		{true, w.hairpin, sources(addSources)},
	} {
		if len(op.elem) == 0 || err != nil {
			continue
		}
		if op.add {
			err = w.conn.SetAddElements(op.set, op.elem)
		} else {
			err = w.conn.SetDeleteElements(op.set, op.elem)
		}
	}
	if err != nil {
		return size, err
	}
	if err := w.conn.Flush(); err != nil {
		return size, fmt.Errorf("nftables transaction of %d bytes of elements: %w", size, err)
	}
	return size, nil
}

// close releases the socket.
func (w *elementWriter) close() error { return w.conn.CloseLasting() }

// mappingKey is the key of m in the node-ports map: protocol . node port.
func mappingKey(m Mapping) []byte {
	proto := byte(unix.IPPROTO_TCP)
	if m.Protocol == contract.ProtocolUDP {
		proto = unix.IPPROTO_UDP
	}
	key := make([]byte, 8)
	key[0] = proto
	binary.BigEndian.PutUint16(key[4:], uint16(m.NodePort))
	return key
}

// mappingValue is the value of m in the node-ports map: Pod address . Pod
// port.
func mappingValue(m Mapping) []byte {
	addr := m.PodIP.AsSlice()
	val := make([]byte, len(addr)+4)
	copy(val, addr)
	binary.BigEndian.PutUint16(val[len(addr):], uint16(m.PodPort))
	return val
}
