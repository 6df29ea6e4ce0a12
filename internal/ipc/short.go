package ipc

// The SHORT message (type 12): a process of a session tells gpusliced that
// the driver refused an allocation its quota allowed, on the GPU the
// payload names (its UUID): the GPU is short of memory the scheduler
// promised, most likely because something holds more than its quota
// without going through the interceptor. gpusliced answers OK and audits
// the node's GPUs at once instead of at its next pass (docs/protocol.md,
// docs/daemon.md "Audit"). It decides nothing else: the audit acts only on
// what the driver reports. Sent at most every few milliseconds per process
// (the interceptor's rate limit) and taken at most every few milliseconds
// in all (the daemon's), so it costs the daemon a bounded amount whoever
// sends it.
const TypeShort Type = 12

// MaxGPUName bounds the GPU UUID a SHORT carries.
const MaxGPUName = 96

// Short sends SHORT for the GPU with that UUID and waits for the OK.
func (c *Conn) Short(uuid string) error {
	resp, files, err := c.roundTrip(Request{Type: TypeShort, GPU: []byte(uuid)})
	if err != nil {
		return err
	}
	return expect(resp, files, TypeOK)
}
