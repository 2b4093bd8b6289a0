package domainstore

import "testing"

// The budget latch names one first worker to find the budget spent.
func TestTheBudgetIsFoundSpentOnce(t *testing.T) {
	t.Parallel()
	var b budgetLatch
	if b.spent() {
		t.Fatal("spent before anyone found it so")
	}
	if !b.markSpent() || b.markSpent() || !b.spent() {
		t.Fatal("want the first markSpent to be first, the second not, and the latch to stay spent")
	}
}
