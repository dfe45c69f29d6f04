package queue

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
	"strings"
	"time"
)

// A ticket and a pass are "<fields>.<mac>": dot-separated decimal fields
// and the first 16 bytes of their HMAC-SHA256 under the room's key, in
// base64url. A kind letter first keeps a ticket from passing for a pass:
//
//	ticket  t.<activity>.<uid>.<place>      place: "p<r>" or "s<n>" (join.lua)
//	pass    a.<activity>.<uid>.<expiry>     expiry: Unix seconds
const macLen = 16

func (r *Room) sign(fields string) string {
	return fields + "." + base64.RawURLEncoding.EncodeToString(r.mac(fields))
}

func (r *Room) mac(fields string) []byte {
	h := r.macs.Get().(hash.Hash)
	defer r.macs.Put(h)
	h.Reset()
	h.Write([]byte(fields))
	return h.Sum(nil)[:macLen]
}

// open checks the mac of a signed token and returns its fields.
func (r *Room) open(token string) ([]string, bool) {
	i := strings.LastIndexByte(token, '.')
	if i < 0 || len(token) > 200 {
		return nil, false
	}
	mac, err := base64.RawURLEncoding.DecodeString(token[i+1:])
	if err != nil || !hmac.Equal(mac, r.mac(token[:i])) {
		return nil, false
	}
	return strings.Split(token[:i], "."), true
}

func ticketFields(activity, uid int64, place string) string {
	return "t." + strconv.FormatInt(activity, 10) + "." + strconv.FormatInt(uid, 10) + "." + place
}

// Pass returns a pass for uid's grab in activity, valid until expiry.
func (r *Room) pass(activity, uid int64, expiry time.Time) string {
	return r.sign("a." + strconv.FormatInt(activity, 10) + "." + strconv.FormatInt(uid, 10) + "." + strconv.FormatInt(expiry.Unix(), 10))
}

// VerifyPass reports whether pass lets uid grab in activity at now: signed
// by this room's key, for this user and this activity, not expired. It
// reads nothing but the pass: no Redis.
func (r *Room) VerifyPass(activity, uid int64, pass string, now time.Time) error {
	if pass == "" {
		return ErrPassRequired
	}
	f, ok := r.open(pass)
	if !ok || len(f) != 4 || f[0] != "a" {
		return ErrPassInvalid
	}
	a, err1 := strconv.ParseInt(f[1], 10, 64)
	u, err2 := strconv.ParseInt(f[2], 10, 64)
	exp, err3 := strconv.ParseInt(f[3], 10, 64)
	switch {
	case err1 != nil || err2 != nil || err3 != nil:
		return ErrPassInvalid
	case a != activity || u != uid:
		return ErrPassInvalid
	case now.Unix() >= exp:
		return ErrPassExpired
	}
	return nil
}

// parseTicket checks a ticket and returns what it holds.
func (r *Room) parseTicket(token string) (activity, uid int64, place string, ok bool) {
	f, ok := r.open(token)
	if !ok || len(f) != 4 || f[0] != "t" || len(f[3]) < 2 {
		return 0, 0, "", false
	}
	a, err1 := strconv.ParseInt(f[1], 10, 64)
	u, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return a, u, f[3], true
}

// Proof of work on joining (Config.WorkBits): the buyer asks for a
// challenge, "w.<activity>.<uid>.<issued>" signed (issued in Unix seconds),
// and joins with a nonce such that SHA-256 of "<challenge>.<nonce>" starts
// with WorkBits zero bits. The challenge binds the work to one buyer and one
// sale, and lasts WorkTTL: work done for one account does not serve
// another, nor more than a few minutes ahead. Nothing is stored.

// WorkTTL is how long a challenge may be answered.
const WorkTTL = 10 * time.Minute

// Challenge returns a challenge for uid's join of activity, and the zero
// bits its answer needs ("" and 0 when the room asks no work).
func (r *Room) Challenge(activity, uid int64, now time.Time) (string, int) {
	if r.cfg.WorkBits == 0 {
		return "", 0
	}
	return r.sign("w." + strconv.FormatInt(activity, 10) + "." + strconv.FormatInt(uid, 10) + "." + strconv.FormatInt(now.Unix(), 10)), r.cfg.WorkBits
}

// VerifyWork checks a join's proof of work: a challenge of this room for
// this buyer and sale, not older than WorkTTL, and a nonce that answers it.
func (r *Room) VerifyWork(activity, uid int64, challenge, nonce string, now time.Time) error {
	if r.cfg.WorkBits == 0 {
		return nil
	}
	if challenge == "" || nonce == "" {
		return ErrWorkRequired
	}
	f, ok := r.open(challenge)
	if !ok || len(f) != 4 || f[0] != "w" || len(nonce) > 32 {
		return ErrWorkInvalid
	}
	a, err1 := strconv.ParseInt(f[1], 10, 64)
	u, err2 := strconv.ParseInt(f[2], 10, 64)
	issued, err3 := strconv.ParseInt(f[3], 10, 64)
	switch {
	case err1 != nil || err2 != nil || err3 != nil || a != activity || u != uid:
		return ErrWorkInvalid
	case now.Sub(time.Unix(issued, 0)) > WorkTTL:
		return ErrWorkExpired
	case !Solves(challenge, nonce, r.cfg.WorkBits):
		return ErrWorkInvalid
	}
	return nil
}

// Solves reports whether SHA-256 of "<challenge>.<nonce>" starts with bits
// zero bits.
func Solves(challenge, nonce string, bits int) bool {
	sum := sha256.Sum256([]byte(challenge + "." + nonce))
	for i := 0; i < bits; i++ {
		if sum[i/8]&(0x80>>(i%8)) != 0 {
			return false
		}
	}
	return true
}

// Solve finds a nonce that answers challenge: about 2^bits hashes. A
// buyer's client does this (the buyer's page in JavaScript); it is here for
// Go clients and tests.
func Solve(challenge string, bits int) string {
	for n := 0; ; n++ {
		if s := strconv.Itoa(n); Solves(challenge, s, bits) {
			return s
		}
	}
}
