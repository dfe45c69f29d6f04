package httpapi

import (
	"net/http"
	"strconv"

	"github.com/seckilldev/seckill"
)

// The admin API of the blocklist. A block holds on every instance within
// a second (see limit.Blocklist); a blocked user gets 403 blocked on every
// request that names them.

type blockBody struct {
	UserID  string `json:"user_id"`
	Blocked bool   `json:"blocked"`
}

func (s *Server) routeBlocks() {
	s.handle("/api/v1/blocks", "blocks", map[string]http.HandlerFunc{"GET": s.listBlocks})
	s.handle("/api/v1/blocks/{user}", "block", map[string]http.HandlerFunc{
		"GET": s.getBlock, "PUT": s.putBlock, "DELETE": s.deleteBlock})
}

func (s *Server) listBlocks(w http.ResponseWriter, r *http.Request) {
	if err := s.admin(r); err != nil {
		writeError(w, err)
		return
	}
	ids, err := s.blocklist.List(r.Context())
	if err != nil {
		s.unreachable(w, r, err)
		return
	}
	users := make([]string, len(ids))
	for i, id := range ids {
		users[i] = strconv.FormatInt(id, 10)
	}
	writeJSON(w, http.StatusOK, map[string][]string{"user_ids": users})
}

// blockUser parses the path's user id, once the admin token is checked.
func (s *Server) blockUser(r *http.Request) (int64, error) {
	if err := s.admin(r); err != nil {
		return 0, err
	}
	uid, ok := parsePositive(r.PathValue("user"))
	if !ok {
		return 0, seckill.Errorf(seckill.EINVALID, "user id must be a positive 64-bit integer")
	}
	return uid, nil
}

func (s *Server) getBlock(w http.ResponseWriter, r *http.Request) {
	uid, err := s.blockUser(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, blockBody{UserID: strconv.FormatInt(uid, 10), Blocked: s.blocklist.Blocked(uid)})
}

func (s *Server) putBlock(w http.ResponseWriter, r *http.Request)    { s.setBlock(w, r, true) }
func (s *Server) deleteBlock(w http.ResponseWriter, r *http.Request) { s.setBlock(w, r, false) }

func (s *Server) setBlock(w http.ResponseWriter, r *http.Request, block bool) {
	uid, err := s.blockUser(r)
	if err != nil {
		writeError(w, err)
		return
	}
	change := s.blocklist.Unblock
	if block {
		change = s.blocklist.Block
	}
	if err := change(r.Context(), uid); err != nil {
		s.unreachable(w, r, err)
		return
	}
	if block {
		s.log.Info("user blocked", "user", uid)
	} else {
		s.log.Info("user unblocked", "user", uid)
	}
	writeJSON(w, http.StatusOK, blockBody{UserID: strconv.FormatInt(uid, 10), Blocked: block})
}

// unreachable answers 503 for a blocklist that Redis could not serve.
func (s *Server) unreachable(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Warn("blocklist", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, seckill.Errorf(seckill.EUNAVAILABLE, "the blocklist cannot be reached right now"))
}
