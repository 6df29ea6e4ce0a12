package ipc

import (
	"encoding/binary"
	"fmt"
)

// The VIEW request (type 10) lets any local user read their own jobs over
// the IPC socket; the daemon answers VIEW_OK (type 11) with a JSON document
// (docs/protocol.md). Who the caller is comes from SO_PEERCRED, never from
// the payload.
const (
	TypeView   Type = 10
	TypeViewOK Type = 11
)

// CodeNotYours answers a VIEW naming a job the caller may not read. It is
// the same for a job of another user and for a job that does not exist.
const CodeNotYours = 8

// NotYoursMessage is the one line every refused VIEW carries.
const NotYoursMessage = "no job of yours with that id on this node"

// ViewOp selects what a VIEW asks for.
type ViewOp uint16

// View operations.
const (
	// ViewStatus: a live session of the caller (Session names it; empty
	// asks the daemon for the caller's current job).
	ViewStatus ViewOp = 1
	// ViewReport: the report of a finished job of the caller (Session).
	ViewReport ViewOp = 2
	// ViewLive: the caller's live sessions (root: every session), from Offset.
	ViewLive ViewOp = 3
	// ViewFinished: the caller's finished jobs' reports, from Offset.
	ViewFinished ViewOp = 4
	// ViewGPUs: the node's GPUs with node-wide committed and used bytes.
	ViewGPUs ViewOp = 5
)

// Valid reports whether o is a known operation.
func (o ViewOp) Valid() bool { return o >= ViewStatus && o <= ViewGPUs }

func (o ViewOp) String() string {
	switch o {
	case ViewStatus:
		return "status"
	case ViewReport:
		return "report"
	case ViewLive:
		return "live"
	case ViewFinished:
		return "finished"
	case ViewGPUs:
		return "gpus"
	}
	return fmt.Sprintf("op(%d)", uint16(o))
}

// View is the payload of a VIEW request: u16 op, u32 offset, string session
// (0..63 bytes).
type View struct {
	Op     ViewOp
	Offset uint32
}

// viewPayloadMin is the smallest VIEW payload (op, offset, empty session).
const viewPayloadMin = 2 + 4 + 2

func parseView(d *decoder, r *Request) {
	if d.err != nil || len(d.b) < 2 {
		d.fail("short op")
		return
	}
	r.View.Op = ViewOp(binary.LittleEndian.Uint16(d.b))
	d.b = d.b[2:]
	if !r.View.Op.Valid() {
		d.fail(fmt.Sprintf("unknown view op %d", uint16(r.View.Op)))
		return
	}
	r.View.Offset = d.u32()
	r.Session = d.str("session", 0, MaxSession)
}

func appendView(r Request) []byte {
	p := make([]byte, 0, viewPayloadMin+len(r.Session))
	p = binary.LittleEndian.AppendUint16(p, uint16(r.View.Op))
	p = binary.LittleEndian.AppendUint32(p, r.View.Offset)
	return appendStr(p, string(r.Session))
}

// View sends a VIEW request and returns the JSON document of the reply.
// A refusal is a *RemoteError with Code CodeNotYours.
func (c *Conn) View(op ViewOp, session string, offset uint32) ([]byte, error) {
	if !op.Valid() || len(session) > MaxSession {
		return nil, fmt.Errorf("view: bad op %v or session of %d bytes (max %d)", op, len(session), MaxSession)
	}
	resp, files, err := c.roundTrip(Request{Type: TypeView, Session: []byte(session), View: View{Op: op, Offset: offset}})
	if err != nil {
		return nil, err
	}
	if err := expect(resp, files, TypeViewOK); err != nil {
		return nil, err
	}
	closeAll(files)
	return append([]byte(nil), resp.Status...), nil
}
