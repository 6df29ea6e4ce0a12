package session

import "github.com/gpuslice/gpuslice/internal/api"

// Reports returns the kept reports of released sessions whose owner passes
// keep, most recent first.
func (m *Manager) Reports(keep func(uid uint32) bool) ([]api.Report, error) {
	return m.st.Reports(keep)
}
