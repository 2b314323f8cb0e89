package muster

// Status is a scope's lifecycle state as a router.
type Status int32

const (
	// StatusUnknown is reported before Start.
	StatusUnknown Status = iota
	// Rebalancing: the view is changing; Router answers Rebalancing and
	// senders fan out to every member.
	Rebalancing
	// Converging: the ring is adopted but not every member has announced
	// the same view yet; routers flood (Targets answers !ok).
	Converging
	// Ready: every member agrees with our view; the occupancy table can be
	// trusted as a router.
	Ready
)

func (s Status) String() string {
	switch s {
	case Rebalancing:
		return "rebalancing"
	case Converging:
		return "converging"
	case Ready:
		return "ready"
	}
	return "unknown"
}

// MarshalText renders the status name.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// RouteStatus is the kind of a RouteResult.
type RouteStatus int

const (
	// RouteOK: send once to Node, the group's router.
	RouteOK RouteStatus = iota + 1
	// RouteRebalancing: the view is in flux; send to every node in Members.
	RouteRebalancing
)

// RouteResult is Router's answer.
type RouteResult struct {
	Status  RouteStatus
	Node    string   // the router, when Status == RouteOK
	Members []string // fan-out set, when Status == RouteRebalancing
}
