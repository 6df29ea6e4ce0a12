package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuslice/gpuslice/daemon/reclaim"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/ledger"
)

// Restore re-adopts the persisted sessions: ledgers are mapped again (or
// recreated with used=0 when missing or unreadable), limits re-applied from
// the database, live processes watched again and dead ones reclaimed.
// Live ledgers without a session are left alone (and logged).
func (m *Manager) Restore() error {
	recs, err := m.st.Sessions()
	if err != nil {
		return fmt.Errorf("load sessions: %w", err)
	}
	// The ledgers are memfds: after a restart they are found in the
	// processes that map them. A session none of whose processes is
	// alive gets a fresh ledger (nothing is allocated; its peak is in the
	// database).
	live, err := ledger.FindLive(m.opt.LedgerDir)
	if err != nil {
		return fmt.Errorf("find live ledgers: %w", err)
	}
	known := map[string]bool{}
	for _, rec := range recs {
		if !api.ValidSessionID(rec.ID) || len(rec.GPUs) == 0 {
			m.opt.Log.Warn("dropping invalid stored session", "session", rec.ID)
			m.st.DeleteSession(rec.ID)
			continue
		}
		known[rec.ID] = true
		if rec.SLUID != "" && !api.IsCanonicalSLUID(rec.SLUID) {
			m.opt.Log.Warn("dropping a malformed stored SLUID", "session", rec.ID, "sluid", rec.SLUID)
			rec.SLUID = ""
		}
		lg, idx := m.ledgerGPUs(rec)
		var led *ledger.Ledger
		err := errors.New("no live process maps it")
		if lv, ok := live[rec.ID]; ok {
			led, err = ledger.Adopt(m.opt.LedgerDir, rec.ID, lv)
			if err == nil && !sameGPUs(led, rec.GPUs) {
				led.Close()
				err = fmt.Errorf("%w: GPU list differs from the stored session", ledger.ErrInvalid)
			}
			if err != nil {
				m.opt.Log.Warn("a live ledger cannot be adopted; recreating it", "session", rec.ID, "pid", lv.PID, "reason", err)
			}
		}
		if err != nil {
			m.opt.Log.Info("new ledger", "session", rec.ID, "reason", err)
			led, err = ledger.Create(m.opt.LedgerDir, rec.ID, lg, m.opt.Slots)
			if err != nil {
				return fmt.Errorf("recreate ledger %s: %w", rec.ID, err)
			}
		}
		s := &Session{rec: rec, uid: rec.UID, led: led, gidx: idx, images: map[int]uint64{}, auditPeak: make([]uint64, len(idx)), seenPeak: make([]uint64, len(idx)), fig: newFigures(len(idx))}
		want := m.limitSlice(rec)
		for g, v := range want {
			if led.Limit(g) != v {
				if err := led.SetLimits(want); err != nil {
					return fmt.Errorf("ledger %s: %w", rec.ID, err)
				}
				break
			}
		}
		adopted := 0
		for _, sl := range led.Attached() {
			k := reclaim.Key{Session: rec.ID, Slot: sl.Index, PID: sl.PID, StartTime: sl.StartTime}
			if sl.State == ledger.SlotAttached {
				if err := m.watcher.Add(k); err == nil {
					s.images[sl.Index] = reclaim.ImageToken(sl.PID)
					adopted++
					continue
				} else if !errors.Is(err, reclaim.ErrGone) {
					m.opt.Log.Warn("pidfd watch failed; relying on the /proc sweep", "pid", sl.PID, "err", err)
					if reclaim.Alive(sl.PID, sl.StartTime) {
						s.images[sl.Index] = reclaim.ImageToken(sl.PID)
						adopted++
						continue
					}
				}
			}
			m.reclaimSlotLocked(s, sl.Index)
		}
		m.rebaseIfIdleLocked(s)
		m.applyDriverLimits(rec, idx)
		m.mu.Lock()
		m.sessions[rec.ID] = s
		if rec.SLUID != "" {
			m.bySLUID[rec.SLUID] = rec.ID
		}
		m.commitLocked(rec.Limits, +1)
		m.mu.Unlock()
		m.opt.Log.Info("session re-adopted", "session", rec.ID, "processes", adopted, "sluid", rec.SLUID)
	}
	// A live ledger without a session record (a crash between the ledger
	// and the database writes, or a database restored from a backup) is
	// reported, never taken away from the processes that map it. Links
	// left by the previous daemon to ledgers no longer there are removed.
	for id, lv := range live {
		if !known[id] {
			m.opt.Log.Warn("a live process maps a ledger of a session the database does not list; left alone",
				"session", id, "pid", lv.PID)
		}
	}
	entries, err := os.ReadDir(m.opt.LedgerDir)
	if err != nil {
		return fmt.Errorf("read ledger dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		id := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".tmp"), ".limits"), ".counters")
		if !known[id] {
			os.Remove(filepath.Join(m.opt.LedgerDir, name))
		}
	}
	m.watchCreators()
	return nil
}

func sameGPUs(led *ledger.Ledger, uuids []string) bool {
	if led.NGPUs() != len(uuids) {
		return false
	}
	for g, u := range uuids {
		if led.UUID(g) != u {
			return false
		}
	}
	return true
}
