// The NRI connection multiplexer, written for cri-resmgr's interop tests from NRI's
// description of its wire format (not upstream's code): frames of an 8-byte header
// (big-endian connection id, payload length) and the payload, several logical byte
// streams over one socket, no signalling to open one. A payload may be at most one
// whole ttRPC message (10-byte header + 4 MiB), as NRI allows.
//
// Reads are byte-stream reads (any buffer size works), unlike NRI's, whose reads
// return one whole frame: the one-off check with upstream's multiplexer (docs/nri.md)
// covers that difference.
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

const (
	muxHeaderLen  = 8
	maxMuxPayload = 10 + 4<<20
)

// newMux is the multiplexer the program uses; the one-off check swaps this file.
func newMux(trunk net.Conn) muxer { return newOwnMux(trunk) }

type ownMux struct {
	trunk   net.Conn
	wlock   sync.Mutex
	lock    sync.Mutex
	conns   map[uint32]*muxConn
	done    chan struct{}
	once    sync.Once
	unblock sync.Once
	err     error
}

// newOwnMux reads nothing until Unblock: frames for a connection not opened yet are
// dropped, so the connections are opened first (as NRI's runtime side does).
func newOwnMux(trunk net.Conn) *ownMux {
	return &ownMux{trunk: trunk, conns: map[uint32]*muxConn{}, done: make(chan struct{})}
}

func (m *ownMux) Unblock() {
	m.unblock.Do(func() { go m.reader() })
}

func (m *ownMux) Open(id uint32) (net.Conn, error) {
	if id == 0 {
		return nil, errors.New("connection id 0 is reserved")
	}
	m.lock.Lock()
	defer m.lock.Unlock()
	c, ok := m.conns[id]
	if !ok {
		c = &muxConn{id: id, mux: m}
		c.cond = sync.NewCond(&c.lock)
		m.conns[id] = c
		select {
		case <-m.done:
			c.closed = true
		default:
		}
	}
	return c, nil
}

func (m *ownMux) Listen(id uint32) (net.Listener, error) {
	c, err := m.Open(id)
	if err != nil {
		return nil, err
	}
	return &oneConnListener{conn: c, done: m.done}, nil
}

func (m *ownMux) Close() error {
	m.once.Do(func() {
		close(m.done)
		m.trunk.Close()
		m.lock.Lock()
		defer m.lock.Unlock()
		for _, c := range m.conns {
			c.shut()
		}
	})
	return nil
}

func (m *ownMux) reader() {
	defer m.Close()
	var hdr [muxHeaderLen]byte
	for {
		if _, err := io.ReadFull(m.trunk, hdr[:]); err != nil {
			return
		}
		id := binary.BigEndian.Uint32(hdr[0:4])
		n := binary.BigEndian.Uint32(hdr[4:8])
		if n > maxMuxPayload {
			m.err = fmt.Errorf("frame for connection %d announces %d bytes", id, n)
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(m.trunk, buf); err != nil {
			return
		}
		m.lock.Lock()
		c := m.conns[id]
		m.lock.Unlock()
		if c != nil {
			c.deliver(buf)
		}
	}
}

func (m *ownMux) write(id uint32, p []byte) (int, error) {
	if len(p) > maxMuxPayload {
		return 0, fmt.Errorf("oversized frame payload (%d > %d)", len(p), maxMuxPayload)
	}
	frame := make([]byte, muxHeaderLen+len(p))
	binary.BigEndian.PutUint32(frame[0:4], id)
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(p)))
	copy(frame[muxHeaderLen:], p)
	m.wlock.Lock()
	defer m.wlock.Unlock()
	if _, err := m.trunk.Write(frame); err != nil {
		m.Close()
		return 0, err
	}
	return len(p), nil
}

// muxConn is one logical connection: a net.Conn whose reads block for what the
// peer sent on its id.
type muxConn struct {
	id     uint32
	mux    *ownMux
	lock   sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool
}

func (c *muxConn) deliver(p []byte) {
	c.lock.Lock()
	c.buf = append(c.buf, p...)
	c.lock.Unlock()
	c.cond.Broadcast()
}

func (c *muxConn) shut() {
	c.lock.Lock()
	c.closed = true
	c.lock.Unlock()
	c.cond.Broadcast()
}

func (c *muxConn) Read(p []byte) (int, error) {
	c.lock.Lock()
	defer c.lock.Unlock()
	for len(c.buf) == 0 && !c.closed {
		c.cond.Wait()
	}
	if len(c.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *muxConn) Write(p []byte) (int, error) {
	c.lock.Lock()
	closed := c.closed
	c.lock.Unlock()
	if closed {
		return 0, io.EOF
	}
	return c.mux.write(c.id, p)
}

func (c *muxConn) Close() error                       { c.shut(); return nil }
func (c *muxConn) LocalAddr() net.Addr                { return nil }
func (c *muxConn) RemoteAddr() net.Addr               { return nil }
func (c *muxConn) SetDeadline(_ time.Time) error      { return nil }
func (c *muxConn) SetReadDeadline(_ time.Time) error  { return nil }
func (c *muxConn) SetWriteDeadline(_ time.Time) error { return nil }

// oneConnListener hands ttRPC's Serve the one logical connection, then blocks
// until the multiplexer closes.
type oneConnListener struct {
	conn  net.Conn
	done  chan struct{}
	taken bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.taken {
		l.taken = true
		return l.conn, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return nil }
