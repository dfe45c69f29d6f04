package compare

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Save writes the table as JSON to path, the file that `seckill serve
// --compare-results` charts on its dashboard. The file is replaced whole
// (written beside it, then renamed), so a dashboard reading it meanwhile
// sees the old table or the new one, never half of one.
func (t *Table) Save(path string) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("compare: encode the results: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("compare: save the results: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("compare: save the results to %s: %w", path, err)
	}
	return nil
}

// Load reads a table written by Save. A file that is not such a table (no
// strategy rows) is an error that names it.
func Load(path string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	var t Table
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("compare: %s is not a comparison's results: %w", path, err)
	}
	if len(t.Rows) == 0 {
		return nil, fmt.Errorf("compare: %s holds no strategy rows", path)
	}
	for _, r := range t.Rows {
		if r.Strategy == "" || len(r.Rounds) == 0 {
			return nil, fmt.Errorf("compare: %s: a row without a strategy or rounds", path)
		}
	}
	return &t, nil
}
