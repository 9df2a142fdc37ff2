package workload

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// DefaultMooncakeDir is where the Mooncake FAST'25 traces live, relative to
// the repository root.
const DefaultMooncakeDir = "../shared/data/mooncake"

// MooncakeBlockTokens is the tokens covered by one hash id of a Mooncake
// trace.
const MooncakeBlockTokens = 512

// Mooncake configures the replay of a Mooncake trace (JSON Lines of
// timestamp in ms, input_length, output_length, hash_ids). Text is
// synthesized per hash id: block id's text is a newline followed by 511
// pseudo-words drawn from a generator seeded with the id, 512 tokens, so
// requests with identical leading ids have byte-identical leading text, and
// the last block is cut to fit input_length.
type Mooncake struct {
	// Path of the trace file.
	Path string

	// Start and Duration select the requests whose timestamp falls in
	// [Start, Start+Duration); a zero Duration means to the end.
	Start, Duration time.Duration

	// Sample keeps this fraction of the conversations, chosen by a hash of
	// their key (the second hash id: the turns of a conversation share
	// their first turn's blocks), so kept conversations keep every turn.
	// Zero or one keeps all.
	Sample float64

	// MaxTokens drops requests whose input plus output exceeds it (the
	// engines' context length); zero keeps all.
	MaxTokens int

	// MaxRequests stops after this many requests; zero keeps all.
	MaxRequests int

	// Spread, when positive, moves the requests that share a timestamp
	// to uniform random times in [timestamp, timestamp+Spread), keeping
	// their trace order. The conversation trace's timestamps fall on a
	// ~3 s grid, so ~10 of its requests share each one, and replayed as
	// they are they arrive at once; spread over the grid's step, they
	// arrive as the rounded arrivals they stand for may have. Zero
	// replays the timestamps as they are; SpreadGrid spreads over the
	// window's grid step (see GridStep).
	Spread time.Duration

	// Seed salts the sampling hash and draws the spread (not the text,
	// which depends on the ids alone).
	Seed uint64
}

// SpreadGrid, as Mooncake.Spread, spreads each timestamp's requests over
// the step of the window's grid: GridStep of its starts.
const SpreadGrid time.Duration = -1

// GridStep returns the step of the grid that convs' starts (sorted) fall
// on: the smallest gap between two distinct starts, or zero when they
// hold a single start. On the conversation trace it is ~3 s (its
// timestamps are multiples of ~3 s, ~10 requests to each); on a trace
// of distinct timestamps it is the trace's resolution or less, so that
// spreading over it moves no request past the next one's timestamp.
func GridStep(convs []*Conversation) time.Duration {
	var step time.Duration
	for i := 1; i < len(convs); i++ {
		if gap := convs[i].Start - convs[i-1].Start; gap > 0 && (step == 0 || gap < step) {
			step = gap
		}
	}
	return step
}

// mooncakeLine is one line of a trace.
type mooncakeLine struct {
	Timestamp    float64 `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// MooncakeStats counts what Load kept and dropped.
type MooncakeStats struct {
	Lines, Kept, TooLong, Sampled int
}

// Load reads the trace and returns the workload: one single-turn
// conversation per request, in trace order, with Start the trace's
// timestamp (from the window's start) and Rate the trace's own request rate
// over the window.
func (c Mooncake) Load() (*Workload, MooncakeStats, error) {
	var st MooncakeStats
	if c.Spread < 0 && c.Spread != SpreadGrid {
		return nil, st, fmt.Errorf("spread must not be negative, got %v", c.Spread)
	}
	f, err := os.Open(c.Path)
	if err != nil {
		return nil, st, fmt.Errorf("opening trace: %w", err)
	}
	defer f.Close()

	var convs []*Conversation
	var first, last time.Duration
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		st.Lines++
		var l mooncakeLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return nil, st, fmt.Errorf("%s:%d: %w", c.Path, st.Lines, err)
		}
		if err := l.check(); err != nil {
			return nil, st, fmt.Errorf("%s:%d: %w", c.Path, st.Lines, err)
		}
		at := time.Duration(l.Timestamp * float64(time.Millisecond))
		if at < c.Start {
			continue
		}
		if c.Duration > 0 && at >= c.Start+c.Duration {
			break
		}
		key := l.HashIDs[0]
		if len(l.HashIDs) > 1 {
			key = l.HashIDs[1]
		}
		if c.Sample > 0 && c.Sample < 1 && float64(mix64(uint64(key)^mix64(c.Seed))>>11)/(1<<53) >= c.Sample {
			st.Sampled++
			continue
		}
		if c.MaxTokens > 0 && l.InputLength+l.OutputLength > c.MaxTokens {
			st.TooLong++
			continue
		}
		if len(convs) == 0 {
			first = at
		}
		last = at
		ids, n := l.HashIDs, l.InputLength
		convs = append(convs, &Conversation{
			ID:    fmt.Sprintf("mc-%d", key),
			Start: at - c.Start,
			Turns: []Turn{{
				MaxTokens: max(1, l.OutputLength),
				LazyBytes: n * BytesPerToken,
				Lazy: func() []Message {
					return []Message{{Role: "user", Content: MooncakeText(ids, n)}}
				},
			}},
		})
		st.Kept++
		if c.MaxRequests > 0 && len(convs) >= c.MaxRequests {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, st, fmt.Errorf("reading trace: %w", err)
	}
	if len(convs) == 0 {
		return nil, st, errors.New("no request of the trace selected")
	}
	rate := 1.0
	if span := last - first; span > 0 {
		rate = float64(len(convs)) / span.Seconds()
	}
	desc := fmt.Sprintf("%s from %v for %v, sample %v: %d of %d requests (%d too long, %d sampled out)",
		c.Path, c.Start, c.Duration, c.Sample, st.Kept, st.Lines, st.TooLong, st.Sampled)
	d := c.Spread
	if d == SpreadGrid {
		d = GridStep(convs)
	}
	if d > 0 {
		spread(convs, d, c.Seed)
		desc += fmt.Sprintf(", each timestamp's requests spread over %v", d)
	}
	return &Workload{
		Name:          "mooncake",
		Description:   desc,
		Conversations: convs,
		Rate:          rate,
	}, st, nil
}

// spread moves each run of requests that share a start to sorted uniform
// random times in [start, start+d), so that they keep their order, and
// then keeps convs sorted by start (a d longer than the gap to the next
// timestamp interleaves the runs).
func spread(convs []*Conversation, d time.Duration, seed uint64) {
	var offsets []time.Duration
	for i := 0; i < len(convs); {
		at := convs[i].Start
		j := i + 1
		for j < len(convs) && convs[j].Start == at {
			j++
		}
		r := newRNG(seed, uint64(at))
		offsets = offsets[:0]
		for range j - i {
			offsets = append(offsets, time.Duration(r.float()*float64(d)))
		}
		slices.Sort(offsets)
		for k, off := range offsets {
			convs[i+k].Start = at + off
		}
		i = j
	}
	slices.SortStableFunc(convs, func(a, b *Conversation) int { return cmp.Compare(a.Start, b.Start) })
}

// check validates a trace line against the format's invariant.
func (l mooncakeLine) check() error {
	n := len(l.HashIDs)
	if n == 0 {
		return errors.New("hash_ids is empty")
	}
	if l.InputLength <= MooncakeBlockTokens*(n-1) || l.InputLength > MooncakeBlockTokens*n {
		return fmt.Errorf("input_length %d does not fit %d blocks of %d tokens", l.InputLength, n, MooncakeBlockTokens)
	}
	return nil
}

// MooncakeText returns the synthesized text of a prompt of inputTokens
// tokens made of the blocks ids: each full block is MooncakeBlockTokens
// tokens, the last one is cut.
func MooncakeText(ids []int64, inputTokens int) string {
	var b strings.Builder
	b.Grow(inputTokens * BytesPerToken)
	for i, id := range ids {
		n := min(MooncakeBlockTokens, inputTokens-i*MooncakeBlockTokens)
		if n <= 0 {
			break
		}
		b.WriteByte('\n')
		appendWords(&b, newRNG(hashString("mooncake-block"), uint64(id)), n-1)
	}
	return b.String()
}
