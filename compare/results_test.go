package compare_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill/compare"
)

// Save and Load round-trip a table; Load names the file it cannot use,
// and Save leaves nothing behind when it cannot write.
func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "results.json")
	want := &compare.Table{Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Note: "n",
		Rows: []compare.Row{{Strategy: compare.Naive, Throughput: 123, Rounds: []compare.Round{{Tally: compare.Tally{Stock: 10, Sold: 12, Oversold: 2}}}}}}
	if err := want.Save(file); err != nil {
		t.Fatal(err)
	}
	got, err := compare.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Started.Equal(want.Started) || len(got.Rows) != 1 || got.Rows[0].Rounds[0].Oversold != 2 || got.Rows[0].Throughput != 123 {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for body, msg := range map[string]string{"not json": "is not a comparison's results", `{"rows":[]}`: "holds no strategy rows",
		`{"rows":[{"strategy":"lua"}]}`: "without a strategy or rounds"} {
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := compare.Load(file); err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), file) {
			t.Errorf("Load of %q: %v, want an error naming the file and saying %q", body, err, msg)
		}
	}
	if err := want.Save(filepath.Join(dir, "missing", "r.json")); err == nil {
		t.Error("Save into a missing directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want only results.json", len(entries))
	}
}
