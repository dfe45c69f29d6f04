package limit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Blocklist is a set of blocked users kept in Redis and shared by every
// instance. Each instance holds a copy in memory, so the check on the grab
// path is a map lookup; Run polls a version counter (one GET) every
// PollInterval and reloads the set when it moved, so a block made on one
// instance holds on all of them within that interval plus one round trip.
//
// Keys (one hash tag, so a transaction touches one Cluster slot):
// <prefix>:{blocklist}:users, a set of user ids, and
// <prefix>:{blocklist}:version, a counter moved by every change.
type Blocklist struct {
	rdb     redis.UniversalClient
	users   string
	version string
	log     *slog.Logger
	// PollInterval is how often Run checks for changes. Default 200ms.
	PollInterval time.Duration

	set    atomic.Pointer[map[int64]struct{}]
	loaded atomic.Pointer[string] // the version the set was read at
}

// NewBlocklist returns the blocklist under prefix. It is empty until the
// first Load.
func NewBlocklist(rdb redis.UniversalClient, prefix string, log *slog.Logger) *Blocklist {
	base := prefix + ":{blocklist}:"
	b := &Blocklist{rdb: rdb, users: base + "users", version: base + "version", log: log, PollInterval: 200 * time.Millisecond}
	empty := map[int64]struct{}{}
	b.set.Store(&empty)
	return b
}

// Blocked reports whether uid is blocked, from memory.
func (b *Blocklist) Blocked(uid int64) bool {
	_, ok := (*b.set.Load())[uid]
	return ok
}

// Block adds uid to the list; every instance refuses it within
// PollInterval, this one at once.
func (b *Blocklist) Block(ctx context.Context, uid int64) error {
	return b.change(ctx, func(p redis.Pipeliner) { p.SAdd(ctx, b.users, uid) })
}

// Unblock removes uid from the list.
func (b *Blocklist) Unblock(ctx context.Context, uid int64) error {
	return b.change(ctx, func(p redis.Pipeliner) { p.SRem(ctx, b.users, uid) })
}

func (b *Blocklist) change(ctx context.Context, op func(redis.Pipeliner)) error {
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		op(p)
		p.Incr(ctx, b.version)
		return nil
	})
	if err != nil {
		return fmt.Errorf("blocklist: %w", err)
	}
	return b.Load(ctx)
}

// List returns the blocked users, in ascending order, as Redis holds them.
func (b *Blocklist) List(ctx context.Context) ([]int64, error) {
	members, err := b.rdb.SMembers(ctx, b.users).Result()
	if err != nil {
		return nil, fmt.Errorf("blocklist: %w", err)
	}
	ids, err := parseIDs(members)
	slices.Sort(ids)
	return ids, err
}

// Load reads the list from Redis if its version moved since the last read.
func (b *Blocklist) Load(ctx context.Context) error {
	v, err := b.rdb.Get(ctx, b.version).Result()
	if err := ignoreNil(err); err != nil {
		return fmt.Errorf("blocklist: %w", err)
	}
	if last := b.loaded.Load(); last != nil && *last == v {
		return nil
	}
	// The version and the set in one transaction: a change between the
	// two reads would otherwise be missed until the next one.
	var get *redis.StringCmd
	var members *redis.StringSliceCmd
	if _, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, b.version)
		members = p.SMembers(ctx, b.users)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("blocklist: %w", err)
	}
	if err := errors.Join(members.Err(), ignoreNil(get.Err())); err != nil {
		return fmt.Errorf("blocklist: %w", err)
	}
	ids, err := parseIDs(members.Val())
	if err != nil {
		return err
	}
	set := make(map[int64]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	v = get.Val()
	b.set.Store(&set)
	b.loaded.Store(&v)
	return nil
}

// Run keeps the copy in memory current until ctx ends.
func (b *Blocklist) Run(ctx context.Context) error {
	t := time.NewTicker(b.PollInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := b.Load(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			b.log.Warn("blocklist: cannot read redis; the last list read stays in force", "err", err)
			failing = true
		case err == nil && failing:
			b.log.Info("blocklist: redis answers again")
			failing = false
		}
	}
}

func ignoreNil(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

func parseIDs(members []string) ([]int64, error) {
	ids := make([]int64, 0, len(members))
	for _, m := range members {
		id, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("blocklist: member %q is not a user id", m)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
