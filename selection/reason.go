package selection

// Reason says why Choose picked its candidate. Its String values form a
// small fixed set, safe as a metric label.
type Reason uint8

// The reasons, in the order Choose considers them.
const (
	// ReasonNone: there were no candidates; Choice.Index is -1.
	ReasonNone Reason = iota
	// ReasonMatch: the deepest holder, which is under the bound (with
	// Policy.Cost: and no move from it saves more than the margin).
	ReasonMatch
	// ReasonSpill: the deepest holder is over the bound, so the deepest
	// holder under it (the next-deepest, or an equally deep one ranked
	// lower by rendezvous hashing). With Policy.Cost: that, or another
	// holder whose cost is less than that one's by more than the margin.
	ReasonSpill
	// ReasonSpillCold: every holder is over the bound, so the
	// rendezvous-hash winner among the candidates under it, as for a cold
	// request. The prefix is lost for this request. With Policy.Cost:
	// that, or a candidate that holds no useful prefix whose cost is
	// less than the deepest holder's under the bound by more than the
	// margin.
	ReasonSpillCold
	// ReasonCold: no candidate holds a useful prefix; the
	// rendezvous-hash winner of the placement key, which is under the
	// bound.
	ReasonCold
	// ReasonColdSpill: no candidate holds a useful prefix and the
	// rendezvous-hash winner is over the bound, so the highest-ranked
	// candidate under it.
	ReasonColdSpill
	// ReasonLeastLoaded: no candidate is under the bound (only possible
	// with an invalid Policy), so the least-loaded candidate.
	ReasonLeastLoaded
	// ReasonPrefill: a cold request with Policy.ColdBacklog, moved from
	// the candidate the cold rules chose to one under the bound and the
	// cold bound with less prefill queued (Candidate.Backlog). With
	// Policy.Cost: a cold request moved from the rendezvous-hash winner
	// under the bound to the least cost, which is less by more than the
	// margin.
	ReasonPrefill

	numReasons // must stay last
)

var reasonNames = [numReasons]string{
	ReasonNone:        "none",
	ReasonMatch:       "match",
	ReasonSpill:       "spill",
	ReasonSpillCold:   "spill_cold",
	ReasonCold:        "cold",
	ReasonColdSpill:   "cold_spill",
	ReasonLeastLoaded: "least_loaded",
	ReasonPrefill:     "prefill",
}

// String returns the reason's snake_case name, for metric labels and
// placeholders, or "unknown" for a value that is not one of the reasons
// (so a label set stays bounded).
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons returns every reason Choose can return, in order, so a caller
// can initialize one metric series per reason. It returns a new slice.
func Reasons() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}
