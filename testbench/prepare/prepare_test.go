package prepare_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/snip/snip-jobs/testbench/prepare"
)

// The steps of a lane run in order, one after another; lanes run side by
// side (the first step of lane 0 finishes only once lane 1's has started);
// every failure is reported, and a failed step does not stop its lane.
func TestStepsRunInOrderWithinALaneAndLanesSideBySide(t *testing.T) {
	var mu sync.Mutex
	var order []string
	record := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, name)
	}
	started := make(chan struct{})
	step := func(name string, lane int, body func() error) prepare.Step {
		return prepare.Step{Name: name, Lane: lane, Build: func(context.Context) (string, error) {
			record(name)
			return "", body()
		}}
	}
	steps := []prepare.Step{
		step("a1", 0, func() error { <-started; return nil }),
		step("a2", 0, func() error { return errors.New("a2 broke") }),
		step("a3", 0, func() error { return nil }),
		step("b1", 1, func() error { close(started); return nil }),
	}
	err := prepare.Run(context.Background(), io.Discard, steps)
	if err == nil || !strings.Contains(err.Error(), "a2: a2 broke") || !strings.Contains(err.Error(), "1 of 4 steps failed") {
		t.Errorf("Run: %v; want a2's failure, one of four", err)
	}
	var lane0 []string
	for _, name := range order {
		if strings.HasPrefix(name, "a") {
			lane0 = append(lane0, name)
		}
	}
	if !slices.Equal(lane0, []string{"a1", "a2", "a3"}) || len(order) != 4 {
		t.Errorf("ran %v; want a1, a2, a3 in that order and b1 beside them", order)
	}
}
