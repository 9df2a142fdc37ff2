package driver

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// orphanEnv makes the test binary an edge's parent that dies without
// stopping it (see TestEdgesDieWithParent).
const orphanEnv = "PREFIXBENCH_TEST_ORPHAN"

func TestMain(m *testing.M) {
	// The multi-edge tests re-execute this binary as each edge.
	ServeEdgeIfChild()
	if cfg := os.Getenv(orphanEnv); cfg != "" {
		os.Exit(orphan(cfg))
	}
	os.Exit(m.Run())
}

// orphan starts one edge with the config cfg, prints its pid and exits
// at once, as a crashed benchmark would, without stopping it.
func orphan(cfg string) int {
	listens, err := ReservePorts(1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	edges, err := StartEdges(context.Background(), [][]byte{[]byte(fmt.Sprintf(cfg, listens[0]))}, listens)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(edges[0].Pid())
	return 0
}
