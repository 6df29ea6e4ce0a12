package reclaim

// Watches reports whether k is watched: the daemon registered exactly this
// process (session, slot, pid and start time) when it attached or was
// re-adopted. The key is the daemon's own record, not a slot the job's
// processes can write. No system call.
func (w *Watcher) Watches(k Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.byKey[k]
	return ok
}
