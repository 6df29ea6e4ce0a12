package store

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/gpuslice/gpuslice/internal/api"
	bolt "go.etcd.io/bbolt"
)

// Reports returns the reports kept in the history whose owner passes keep,
// most recently released first. History is bounded by the daemon's
// retention (PruneHistory), so this reads at most that many reports.
func (s *Store) Reports(keep func(uid uint32) bool) ([]api.Report, error) {
	var out []api.Report
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHistory).ForEach(func(k, v []byte) error {
			var rep api.Report
			if err := json.Unmarshal(v, &rep); err != nil {
				return nil // an unreadable report is skipped, not fatal
			}
			if keep(rep.UID) {
				out = append(out, rep)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Released.Equal(out[j].Released) {
			return out[i].Released.After(out[j].Released)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
