package ipc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// RemoteError is an ERROR frame returned by the daemon.
type RemoteError struct {
	Code    uint32
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("gpusliced: %s (code %d)", e.Message, e.Code)
}

// Conn is a client connection to the daemon's IPC socket. It is not safe
// for concurrent use.
type Conn struct {
	c   *net.UnixConn
	buf []byte
	out []byte
	oob []byte
}

// Dial connects to the IPC socket at path.
func Dial(path string) (*Conn, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", path, err)
	}
	return NewConn(c), nil
}

// NewConn is a client on a connection made elsewhere (one a process
// inherited, say).
func NewConn(c *net.UnixConn) *Conn {
	return &Conn{c: c, buf: make([]byte, HeaderSize+MaxPayload), oob: make([]byte, unix.CmsgSpace(4*4))}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// SetDeadline bounds the next requests.
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Raw gives access to the underlying socket (tests send bad frames).
func (c *Conn) Raw() *net.UnixConn { return c.c }

// roundTrip sends r and reads one response, collecting passed fds.
func (c *Conn) roundTrip(r Request) (Response, []*os.File, error) {
	c.out = AppendRequest(c.out[:0], r)
	if _, err := c.c.Write(c.out); err != nil {
		return Response{}, nil, fmt.Errorf("send %v: %w", r.Type, err)
	}
	var files []*os.File
	got := 0
	for got < HeaderSize {
		n, oobn, _, _, err := c.c.ReadMsgUnix(c.buf[got:], c.oob)
		if oobn > 0 {
			fs, perr := parseRights(c.oob[:oobn])
			files = append(files, fs...)
			if perr != nil {
				closeAll(files)
				return Response{}, nil, perr
			}
		}
		if err != nil {
			closeAll(files)
			return Response{}, nil, fmt.Errorf("read %v reply: %w", r.Type, err)
		}
		if n == 0 {
			closeAll(files)
			return Response{}, nil, fmt.Errorf("read %v reply: connection closed", r.Type)
		}
		got += n
	}
	h, err := ParseHeader(c.buf[:HeaderSize])
	if err != nil {
		closeAll(files)
		return Response{}, nil, err
	}
	for got < HeaderSize+h.Length {
		n, err := c.c.Read(c.buf[got : HeaderSize+h.Length])
		if err != nil {
			closeAll(files)
			return Response{}, nil, fmt.Errorf("read %v reply: %w", r.Type, err)
		}
		got += n
	}
	resp, err := ParseResponse(h.Type, c.buf[HeaderSize:HeaderSize+h.Length])
	if err != nil {
		closeAll(files)
		return Response{}, nil, err
	}
	if resp.Type == TypeError {
		closeAll(files)
		return resp, nil, &RemoteError{Code: resp.Code, Message: string(resp.Message)}
	}
	return resp, files, nil
}

func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "gpuslice-ledger"))
		}
	}
	return files, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func expect(resp Response, files []*os.File, t Type) error {
	if resp.Type != t {
		closeAll(files)
		return fmt.Errorf("%w: got %v, want %v", ErrMalformed, resp.Type, t)
	}
	return nil
}

// Ping sends payload and returns the echoed bytes.
func (c *Conn) Ping(payload []byte) ([]byte, error) {
	resp, files, err := c.roundTrip(Request{Type: TypePing, Ping: payload})
	if err != nil {
		return nil, err
	}
	if err := expect(resp, files, TypePong); err != nil {
		return nil, err
	}
	closeAll(files)
	return resp.Pong, nil
}

// Attachment is the result of a successful ATTACH.
type Attachment struct {
	Slot       uint32
	NGPUs      uint32
	Generation uint64
	Limits     *os.File // O_RDONLY
	Counters   *os.File // O_RDWR
}

// Close closes the ledger files.
func (a *Attachment) Close() {
	if a.Limits != nil {
		a.Limits.Close()
	}
	if a.Counters != nil {
		a.Counters.Close()
	}
}

// Attach registers the calling process in session's ledger.
func (c *Conn) Attach(session, token string) (*Attachment, error) {
	if len(session) > MaxSession || len(token) > MaxToken {
		return nil, errors.New("attach: session must be 0..63 bytes (empty: the daemon decides) and token ≤ 256 bytes")
	}
	resp, files, err := c.roundTrip(Request{Type: TypeAttach, Session: []byte(session), Token: []byte(token)})
	if err != nil {
		return nil, err
	}
	if err := expect(resp, files, TypeAttachOK); err != nil {
		return nil, err
	}
	if len(files) != 2 {
		closeAll(files)
		return nil, fmt.Errorf("attach: received %d fds, want 2", len(files))
	}
	return &Attachment{Slot: resp.Slot, NGPUs: resp.NGPUs, Generation: resp.Generation,
		Limits: files[0], Counters: files[1]}, nil
}

// Detach tells the daemon the caller is done with its slot (the slot and
// its charge stay until the process exits).
func (c *Conn) Detach(slot uint32) error {
	resp, files, err := c.roundTrip(Request{Type: TypeDetach, Slot: slot})
	if err != nil {
		return err
	}
	if err := expect(resp, files, TypeOK); err != nil {
		return err
	}
	closeAll(files)
	return nil
}

// Status returns the session object (JSON) of session. token may be empty.
func (c *Conn) Status(session, token string) ([]byte, error) {
	req := Request{Type: TypeStatus, Session: []byte(session)}
	if token != "" {
		req.Token = []byte(token)
	}
	resp, files, err := c.roundTrip(req)
	if err != nil {
		return nil, err
	}
	if err := expect(resp, files, TypeStatusOK); err != nil {
		return nil, err
	}
	closeAll(files)
	return append([]byte(nil), resp.Status...), nil
}
