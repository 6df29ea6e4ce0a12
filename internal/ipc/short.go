package ipc

// The SHORT message (type 12): a process of a session tells gpusliced that
// the driver refused an allocation its quota allowed, on the GPU the
// payload names (its UUID): the GPU is short of memory the scheduler
// promised, most likely because something holds more than its quota
// without going through the interceptor. gpusliced audits the node's GPUs
// out of turn instead of at its next pass (docs/protocol.md, docs/audit.md
// "Audit"). It decides nothing else: the audit acts only on what the driver
// reports. Only a process attached to a session is heard (anyone else is
// answered CodeNotAttached); the passes its uid asks for are rate-limited
// (the daemon answers OK and folds the excess into one pass), so SHORT
// costs the daemon a bounded amount whoever sends it and however often.
const TypeShort Type = 12

// CodeNotAttached answers a SHORT from a process that is attached to no
// session: nothing is audited.
const CodeNotAttached = 10

// MaxGPUName bounds the GPU UUID a SHORT carries.
const MaxGPUName = 96

// Short sends SHORT for the GPU with that UUID and waits for the OK. A
// refusal is a *RemoteError (CodeNotAttached).
func (c *Conn) Short(uuid string) error {
	resp, files, err := c.roundTrip(Request{Type: TypeShort, GPU: []byte(uuid)})
	if err != nil {
		return err
	}
	return expect(resp, files, TypeOK)
}
