package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/store"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	urls := []string{
		"sqlite://" + filepath.Join(dir, "abs.db"),
		"sqlite://relative.db",
		"sqlite://sub%20dir.db",
		"sqlite://:memory:",
		testenv.PostgresURL(t),
		strings.Replace(testenv.PostgresURL(t), "postgres://", "postgresql://", 1),
		testenv.MySQLURL(t),
	}
	for _, url := range urls {
		s, err := store.Open(context.Background(), url)
		if err != nil {
			t.Errorf("Open(%s): %v", url, err)
			continue
		}
		checkWorks(t, s)
		s.Close()
	}
	for _, name := range []string{"relative.db", "sub dir.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s was not created in the working directory: %v", name, err)
		}
	}
}

func checkWorks(t *testing.T, s seckill.Store) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	a := seckill.Activity{Name: "open", Stock: 1, StartsAt: now, EndsAt: now.Add(time.Hour)}
	if err := s.CreateActivity(ctx, &a); err != nil {
		t.Errorf("CreateActivity: %v", err)
		return
	}
	out, err := s.ApplyOrders(ctx, []seckill.OrderRequest{{OrderID: 1, ActivityID: a.ID, UserID: 1, CreatedAt: now}})
	if err != nil || len(out) != 1 || out[0].Status != seckill.OrderConfirmed {
		t.Errorf("ApplyOrders = %v, %v; want confirmed", out, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tt := range []struct {
		url  string
		want []string
	}{
		{"", []string{"no scheme", "postgres://", "mysql://", "sqlite://"}},
		{"127.0.0.1:5432/db", []string{"no scheme", "postgres://"}},
		{"redis://127.0.0.1:6379", []string{`unsupported database URL scheme "redis"`, "postgres://, postgresql://, mysql:// or sqlite://"}},
		{"postgres://u:secret@127.0.0.1:1/db?sslmode=disable", []string{"postgres: cannot reach database", "127.0.0.1"}},
		{"postgres://u:secret@127.0.0.1:5432/db?sslmode=sometimes", []string{"postgres: bad url", "sslmode"}},
		{"postgres://u:secret@127.0.0.1:notaport/db", []string{"postgres: bad url"}},
		{"mysql://u:secret@127.0.0.1:1/db", []string{"mysql: cannot reach database db at 127.0.0.1:1"}},
		{"mysql://u:secret@127.0.0.1:3306", []string{"mysql: bad url", "no database name"}},
		{"mysql://u:secret@127.0.0.1:3306/db?parseTime=perhaps", []string{"mysql: bad url parameters"}},
		{"mysql://u:secret@127.0.0.1:bad/db", []string{"mysql: bad url", "invalid port"}},
		{"sqlite://", []string{"sqlite: bad url", "no path"}},
		{"sqlite://" + dir + "/missing/dir/x.db", []string{"sqlite: cannot open", "missing/dir/x.db"}},
	} {
		s, err := store.Open(ctx, tt.url)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", tt.url)
			continue
		}
		if s != nil {
			t.Errorf("Open(%q) returned a non-nil Store %#v with its error", tt.url, s)
		}
		t.Logf("Open(%q):\n\t%v", tt.url, err)
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%q) = %v\nwant it to mention %q", tt.url, err, want)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) = %v: the error shows the password", tt.url, err)
		}
	}
}
