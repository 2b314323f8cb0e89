package muster

import "go.uber.org/zap"

// antiEntropy is the add-only reconcile: when ready, owing nothing and not
// alone, it re-asserts every held group to its remote router as a delta at
// a fresh seq (taken before the side-effect-free gather, so a vacancy
// dispatched after the gather always carries a higher seq). It never touches
// owed snapshots or our watermark, and a failure is only logged.
// A shard that does not answer the gather resets the coordinator (non-nil
// error).
func (c *coordinator) antiEntropy() error {
	s := c.s
	if Status(s.status.Load()) != Ready || len(c.owed) > 0 || len(c.members) <= 1 || c.pending != nil || c.leaving {
		return nil
	}
	seq := s.nextSeq()
	held, err := c.gather(true)
	if err != nil {
		return err
	}
	cur := s.view.Load().cur
	byRouter := map[string][]string{}
	for _, g := range held {
		if r := cur.Find(g); r != s.self {
			byRouter[r] = append(byRouter[r], g)
		}
	}
	h := c.hash
	for router, groups := range byRouter {
		msg := &wireMsg{Kind: kindRound, Inc: seq.Inc, Groups: groups, Seq: seq, View: &h}
		s.worker(func() {
			if err := s.call(router, msg); err != nil {
				s.log.Warn("muster: anti-entropy round failed", zap.String("router", router), zap.Error(err))
			}
		})
	}
	s.tr.Emit("muster_anti_entropy", "scope", s.name, "node", s.self, "routers", len(byRouter), "groups", len(held))
	return nil
}
