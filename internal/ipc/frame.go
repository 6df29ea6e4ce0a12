// Package ipc implements the frame codec of the interceptor ↔ gpusliced
// protocol (docs/protocol.md) and a small Go client for it.
//
// A frame is a 12-byte header (magic "GSIP", version, type, payload length)
// followed by at most MaxPayload bytes. Payload decoders are exact: a
// payload with missing or trailing bytes is malformed, and whatever parses
// is the very payload its encoder writes for what was decoded (one
// encoding per message; FuzzFrame checks it).
package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Protocol constants.
const (
	Magic      = 0x50495347 // "GSIP"
	Version    = 1
	HeaderSize = 12
	MaxPayload = 4096
	MaxPing    = 64
	MaxSession = 63
	MaxToken   = 256
)

// Type is a frame type.
type Type uint16

// Frame types.
const (
	TypePing     Type = 1
	TypePong     Type = 2
	TypeAttach   Type = 3
	TypeAttachOK Type = 4
	TypeDetach   Type = 5
	TypeOK       Type = 6
	TypeStatus   Type = 7
	TypeStatusOK Type = 8
	TypeError    Type = 9
)

var typeNames = [...]string{"", "ping", "pong", "attach", "attach_ok", "detach", "ok", "status", "status_ok", "error", "view", "view_ok", "short"}

func (t Type) String() string {
	if int(t) < len(typeNames) && t != 0 {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint16(t))
}

// Valid reports whether t is a known frame type.
func (t Type) Valid() bool { return t >= TypePing && t <= TypeShort }

// Error codes carried by ERROR frames.
const (
	CodeBadRequest   = 1
	CodeUnknown      = 2
	CodeNotPermitted = 3
	CodeBadToken     = 4
	CodeNoSlot       = 5
	CodeInternal     = 6
	CodeVersion      = 7
	// CodeNoSession: the process belongs to no session (it runs in no
	// Slurm job with a quota, and named none); it runs unmanaged.
	CodeNoSession = 9
)

// Errors.
var (
	// ErrMalformed marks a frame or payload that does not parse.
	ErrMalformed = errors.New("malformed frame")
	// ErrVersion marks a frame with an unsupported protocol version.
	ErrVersion = errors.New("unsupported protocol version")
)

// Header is a decoded frame header.
type Header struct {
	Type   Type
	Length int
}

// ParseHeader checks and decodes a frame header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: short header", ErrMalformed)
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != Magic {
		return Header{}, fmt.Errorf("%w: bad magic %#x", ErrMalformed, le.Uint32(b[0:]))
	}
	if v := le.Uint16(b[4:]); v != Version {
		return Header{}, fmt.Errorf("%w %d", ErrVersion, v)
	}
	t := Type(le.Uint16(b[6:]))
	if !t.Valid() {
		return Header{}, fmt.Errorf("%w: unknown type %d", ErrMalformed, uint16(t))
	}
	n := le.Uint32(b[8:])
	if n > MaxPayload {
		return Header{}, fmt.Errorf("%w: payload length %d > %d", ErrMalformed, n, MaxPayload)
	}
	return Header{Type: t, Length: int(n)}, nil
}

// AppendFrame appends a frame of type t with payload p to dst.
func AppendFrame(dst []byte, t Type, p []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, Magic)
	dst = binary.LittleEndian.AppendUint16(dst, Version)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(t))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p)))
	return append(dst, p...)
}

// ReadFrame reads one whole frame from r into buf (which must hold
// HeaderSize+MaxPayload bytes) and returns its type and payload (a slice of buf).
func ReadFrame(r io.Reader, buf []byte) (Type, []byte, error) {
	if _, err := io.ReadFull(r, buf[:HeaderSize]); err != nil {
		return 0, nil, err
	}
	h, err := ParseHeader(buf[:HeaderSize])
	if err != nil {
		return 0, nil, err
	}
	p := buf[HeaderSize : HeaderSize+h.Length]
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return h.Type, p, nil
}

// decoder reads a payload exactly.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
}

func (d *decoder) u32() uint32 {
	if d.err != nil || len(d.b) < 4 {
		d.fail("short u32")
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail("short u64")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// str reads a u16-length string of min..max bytes.
func (d *decoder) str(what string, min, max int) []byte {
	if d.err != nil || len(d.b) < 2 {
		d.fail("short " + what)
		return nil
	}
	n := int(binary.LittleEndian.Uint16(d.b))
	if n < min || n > max || len(d.b)-2 < n {
		d.fail(fmt.Sprintf("%s length %d", what, n))
		return nil
	}
	s := d.b[2 : 2+n]
	d.b = d.b[2+n:]
	return s
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return d.err
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

// Request is a decoded client→daemon message. Byte slices alias the frame
// buffer; copy them to keep them.
type Request struct {
	Type    Type
	Ping    []byte // PING
	Session []byte // ATTACH, STATUS
	Token   []byte // ATTACH, STATUS (optional there)
	Slot    uint32 // DETACH
	View    View   // VIEW (its Session is Session)
	GPU     []byte // SHORT: the GPU's UUID
	Flags   uint32 // ATTACH (optional there): AttachCompute
}

// AttachCompute (an ATTACH flag): the client takes the compute page's fd
// and its session's slot on it with ATTACH_OK (docs/protocol.md).
const AttachCompute = 1

// AttachFlags are the ATTACH flags this side knows.
const AttachFlags = AttachCompute

// NoComputeSlot is ATTACH_OK's compute slot when the session has none.
const NoComputeSlot = 0xFFFFFFFF

// ParseRequest decodes the payload of a client→daemon frame exactly.
func ParseRequest(t Type, p []byte) (Request, error) {
	r := Request{Type: t}
	d := decoder{b: p}
	switch t {
	case TypePing:
		if len(p) > MaxPing {
			return r, fmt.Errorf("%w: ping payload %d > %d bytes", ErrMalformed, len(p), MaxPing)
		}
		r.Ping = p
		return r, nil
	case TypeAttach:
		// Empty: the daemon decides the session from the peer's pid.
		r.Session = d.str("session", 0, MaxSession)
		r.Token = d.str("token", 0, MaxToken)
		// Optional: clients before the compute page send none. A client
		// sends the word only with a flag set, and a daemon refuses flags
		// it does not know (code 1), so a newer client learns to ask again
		// without them: a zero word or an unknown bit is malformed.
		if d.err == nil && len(d.b) > 0 {
			r.Flags = d.u32()
			if d.err == nil && (r.Flags == 0 || r.Flags&^AttachFlags != 0) {
				return r, fmt.Errorf("%w: attach flags %#x", ErrMalformed, r.Flags)
			}
		}
	case TypeDetach:
		r.Slot = d.u32()
	case TypeStatus:
		r.Session = d.str("session", 1, MaxSession)
		if d.err == nil && len(d.b) > 0 {
			r.Token = d.str("token", 0, MaxToken) // optional
		}
	case TypeView:
		parseView(&d, &r)
	case TypeShort:
		r.GPU = d.str("gpu", 1, MaxGPUName)
	default:
		return r, fmt.Errorf("%w: %v is not a request", ErrMalformed, t)
	}
	return r, d.end()
}

// AppendRequest appends the frame for r to dst.
func AppendRequest(dst []byte, r Request) []byte {
	var p []byte
	switch r.Type {
	case TypePing:
		p = r.Ping
	case TypeAttach:
		p = appendStr(appendStr(nil, string(r.Session)), string(r.Token))
		if r.Flags != 0 {
			p = binary.LittleEndian.AppendUint32(p, r.Flags)
		}
	case TypeDetach:
		p = binary.LittleEndian.AppendUint32(nil, r.Slot)
	case TypeStatus:
		p = appendStr(nil, string(r.Session))
		if r.Token != nil { // optional: present when non-nil, even if empty
			p = appendStr(p, string(r.Token))
		}
	case TypeView:
		p = appendView(r)
	case TypeShort:
		p = appendStr(nil, string(r.GPU))
	}
	return AppendFrame(dst, r.Type, p)
}

// Response is a decoded daemon→client message.
type Response struct {
	Type       Type
	Pong       []byte // PONG
	Slot       uint32 // ATTACH_OK
	NGPUs      uint32 // ATTACH_OK
	Generation uint64 // ATTACH_OK
	// ATTACH_OK to an ATTACH with AttachCompute: the session's slot on
	// the compute page (NoComputeSlot: none) and that slot's generation.
	Compute     bool
	ComputeSlot uint32
	ComputeGen  uint64
	Status      []byte // STATUS_OK, VIEW_OK (JSON)
	Code        uint32 // ERROR
	Message     []byte // ERROR
}

// ParseResponse decodes the payload of a daemon→client frame exactly.
func ParseResponse(t Type, p []byte) (Response, error) {
	r := Response{Type: t}
	d := decoder{b: p}
	switch t {
	case TypePong:
		if len(p) > MaxPing {
			return r, fmt.Errorf("%w: pong payload %d > %d bytes", ErrMalformed, len(p), MaxPing)
		}
		r.Pong = p
		return r, nil
	case TypeAttachOK:
		r.Slot = d.u32()
		r.NGPUs = d.u32()
		r.Generation = d.u64()
		if d.err == nil && len(d.b) > 0 {
			r.Compute = true
			r.ComputeSlot = d.u32()
			if d.u32() != 0 && d.err == nil {
				return r, fmt.Errorf("%w: attach_ok reserved word is not 0", ErrMalformed)
			}
			r.ComputeGen = d.u64()
		}
	case TypeOK:
	case TypeStatusOK, TypeViewOK:
		r.Status = p
		return r, nil
	case TypeError:
		r.Code = d.u32()
		r.Message = d.str("message", 0, MaxPayload-6)
	default:
		return r, fmt.Errorf("%w: %v is not a response", ErrMalformed, t)
	}
	return r, d.end()
}

// AppendAttachOK appends an ATTACH_OK frame.
func AppendAttachOK(dst []byte, slot, ngpus uint32, generation uint64) []byte {
	var p [16]byte
	binary.LittleEndian.PutUint32(p[0:], slot)
	binary.LittleEndian.PutUint32(p[4:], ngpus)
	binary.LittleEndian.PutUint64(p[8:], generation)
	return AppendFrame(dst, TypeAttachOK, p[:])
}

// AppendAttachOKCompute appends an ATTACH_OK frame answering an ATTACH
// with AttachCompute: the session's compute slot and its generation follow.
func AppendAttachOKCompute(dst []byte, slot, ngpus uint32, generation uint64, cslot uint32, cgen uint64) []byte {
	var p [32]byte
	binary.LittleEndian.PutUint32(p[0:], slot)
	binary.LittleEndian.PutUint32(p[4:], ngpus)
	binary.LittleEndian.PutUint64(p[8:], generation)
	binary.LittleEndian.PutUint32(p[16:], cslot)
	binary.LittleEndian.PutUint64(p[24:], cgen)
	return AppendFrame(dst, TypeAttachOK, p[:])
}

// AppendError appends an ERROR frame; msg is cut to fit a frame.
func AppendError(dst []byte, code uint32, msg string) []byte {
	if len(msg) > MaxPayload-6 {
		msg = msg[:MaxPayload-6]
	}
	p := make([]byte, 0, 6+len(msg))
	p = binary.LittleEndian.AppendUint32(p, code)
	p = appendStr(p, msg)
	return AppendFrame(dst, TypeError, p)
}

// AppendResponse appends the frame for r to dst.
func AppendResponse(dst []byte, r Response) []byte {
	switch r.Type {
	case TypePong:
		return AppendFrame(dst, TypePong, r.Pong)
	case TypeAttachOK:
		if r.Compute {
			return AppendAttachOKCompute(dst, r.Slot, r.NGPUs, r.Generation, r.ComputeSlot, r.ComputeGen)
		}
		return AppendAttachOK(dst, r.Slot, r.NGPUs, r.Generation)
	case TypeStatusOK, TypeViewOK:
		return AppendFrame(dst, r.Type, r.Status)
	case TypeError:
		return AppendError(dst, r.Code, string(r.Message))
	default:
		return AppendFrame(dst, r.Type, nil)
	}
}
