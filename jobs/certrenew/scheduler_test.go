package certrenew_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// schedulerCluster starts what the renewer needs under the real scheduler: a
// jobtest cluster (etcd, PostgreSQL), a test CA whose HTTP-01 requests go to
// three challenge listeners serving the cluster's database, and options
// pointing at that CA.
func schedulerCluster(t *testing.T) (*jobtest.Cluster, *testCA, certrenew.Options) {
	jc := jobtest.NewCluster(t)
	ca := newTestCA(t, caOptions{})
	var addrs []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: challengeHandler(t, jc.DB, benchtest.Logger(t)), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		addrs = append(addrs, ln.Addr().String())
	}
	ca.front.route(addrs...)

	opts := certrenew.DefaultOptions()
	opts.Directory, opts.CARootsFile, opts.Profile = ca.dirURL, ca.rootsFile, "default"
	opts.KeyFile = writeKeyFile(t, newKey(t))
	opts.RequirePublicTLD = false // names under .test
	return jc, ca, opts
}

// A domain added between passes is certified at once, not at the next
// interval (an hour here): the leader looks for changed custom_domains every
// new_domain_check and runs a pass when it finds one. A domain that cannot be
// certified (an invalid name) does not keep waking it.
func TestANewDomainIsCertifiedWithoutWaitingForTheNextInterval(t *testing.T) {
	t.Parallel()
	jc, _, opts := schedulerCluster(t)
	opts.NewDomainCheck = 100 * time.Millisecond
	job := configs.Job{Name: jobName, Type: "certrenew", Singleton: true, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Hour}, Options: jobtest.Options(t, opts)}
	jc.Start("a", jobtest.Registry(t, certrenew.Type()), []configs.Job{job})
	count := func(sql string, args ...any) int64 { return benchtest.Value[int64](t, jc.DB, sql, args...) }
	passes := func() int64 {
		return count(`SELECT count(*) FROM job_runs WHERE job = $1 AND finished_at IS NOT NULL`, jobName)
	}
	jc.WaitCommit("the first pass, at the start of the term", []string{"job_runs"}, func() bool { return passes() == 1 })

	benchtest.Exec(t, jc.DB, `INSERT INTO custom_domains (domain) VALUES ('new.customer.test'), ('bad name.customer.test')`)
	jc.WaitCommit("the new domain certified", []string{"certrenew_certificates"}, func() bool {
		return count(`SELECT count(*) FROM certrenew_certificates WHERE domain = 'new.customer.test' AND current`) == 1
	})
	if n := count(`SELECT count(*) FROM certrenew_invalid_domains`); n != 1 {
		t.Errorf("%d invalid domains recorded, want 1", n)
	}
	// Twenty checks later, the invalid name has not woken another pass
	// (a pass every check would never leave two quiet seconds).
	jobtest.Eventually(t, "two seconds without a pass", func() bool {
		return count(`SELECT count(*) FROM job_runs WHERE job = $1 AND (finished_at IS NULL OR finished_at > now() - interval '2 seconds')`, jobName) == 0
	})
	if n := passes(); n != 2 {
		t.Errorf("%d passes, want 2: the start of the term, and one for the new domains", n)
	}
}

// A retry request wakes the leader between passes too: the backing-off
// domain is ordered again within new_domain_check, not at the next interval,
// and the handled request does not wake it again.
func TestARetryRequestWakesTheLeader(t *testing.T) {
	t.Parallel()
	jc, ca, opts := schedulerCluster(t)
	opts.NewDomainCheck = 100 * time.Millisecond
	const blocked = "blocked.customer.test"
	if err := ca.db.AddBlockedDomain(blocked); err != nil {
		t.Fatal(err)
	}
	benchtest.Exec(t, jc.DB, `INSERT INTO custom_domains (domain) VALUES ($1)`, blocked)
	job := configs.Job{Name: jobName, Type: "certrenew", Singleton: true, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Hour}, Options: jobtest.Options(t, opts)}
	jc.Start("a", jobtest.Registry(t, certrenew.Type()), []configs.Job{job})
	count := func(sql string, args ...any) int64 { return benchtest.Value[int64](t, jc.DB, sql, args...) }
	passes := func() int64 {
		return count(`SELECT count(*) FROM job_runs WHERE job = $1 AND finished_at IS NOT NULL`, jobName)
	}
	jc.WaitCommit("the first pass, its order refused", []string{"job_runs", "certrenew_domains"}, func() bool {
		return passes() == 1 && count(`SELECT count(*) FROM certrenew_domains WHERE failures = 1`) == 1
	})
	if _, err := certrenew.RequestRetry(context.Background(), jc.DB, opts, blocked, "ops@test"); err != nil {
		t.Fatal(err)
	}
	jc.WaitCommit("the domain ordered again", []string{"certrenew_domains"}, func() bool {
		return count(`SELECT count(*) FROM certrenew_domains WHERE failures = 2`) == 1
	})
	jobtest.Eventually(t, "two seconds without a pass", func() bool {
		return count(`SELECT count(*) FROM job_runs WHERE job = $1 AND (finished_at IS NULL OR finished_at > now() - interval '2 seconds')`, jobName) == 0
	})
	if n := passes(); n != 2 {
		t.Errorf("%d passes, want 2: the start of the term, and one for the request", n)
	}
	if n := len(ca.ordersFor(blocked)); n != 2 {
		t.Errorf("%d orders, want 2", n)
	}
}

// Under the real scheduler, on real etcd terms: three instances run the
// renewer every 200 ms; the leader's process crashes as its new order is on
// its way to the CA (which never makes it). The next leader (a higher token,
// after the lease expired) waits the lock-delay after the crashed term was
// last seen, orders again and stores exactly one certificate.
func TestUnderTheSchedulerALostOrderIsPlacedAgainAfterTheLockDelay(t *testing.T) {
	t.Parallel()
	jc, ca, opts := schedulerCluster(t)
	opts.OrderTimeout = 3 * time.Second
	opts.LockDelay = 3 * time.Second // > 4/3 × the 2 s TTL
	job := configs.Job{Name: jobName, Type: "certrenew", Singleton: true, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: 200 * time.Millisecond}, Options: jobtest.Options(t, opts)}
	reg := jobtest.Registry(t, certrenew.Type())
	nodes := map[string]*jobtest.Node{}
	for _, name := range []string{"a", "b", "c"} {
		nodes[name] = jc.Start(name, reg, []configs.Job{job})
	}
	count := func(sql string, args ...any) int64 {
		var n int64
		if err := jc.DB.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	exec := func(sql string, args ...any) {
		if _, err := jc.DB.Exec(context.Background(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	exec(`INSERT INTO custom_domains (domain) VALUES ('first.customer.test')`)
	jc.WaitCommit("the first certificate", []string{"certrenew_certificates"}, func() bool {
		return count(`SELECT count(*) FROM certrenew_certificates WHERE current`) == 1
	})

	const d = "crash.customer.test"
	var crashed struct {
		sync.Mutex
		token int64
		name  string
		at    time.Time
	}
	var once sync.Once
	ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		if ev.Kind == "newOrder" && ev.Domains[0] == d {
			// Who leads as the request arrives: a request the crashed leader
			// sent before it was gone (seen once under load: a second
			// newOrder 1 ms after the first, let through after the crash) is
			// refused too; a successor's waits here for the crash to finish.
			l, ok := jc.Leader(jobName)
			if !ok {
				t.Errorf("no leader while ordering")
				return
			}
			crash := false
			once.Do(func() {
				crash = true
				nodes[l.Instance].Crash()
				crashed.Lock()
				crashed.token, crashed.name, crashed.at = l.Token, l.Instance, time.Now()
				crashed.Unlock()
			})
			crashed.Lock()
			fromCrashed := l.Token == crashed.token
			crashed.Unlock()
			if crash || fromCrashed { // the CA never takes the crashed leader's order
				problem(w, http.StatusInternalServerError, "urn:ietf:params:acme:error:serverInternal", "lost", "")
				return
			}
		}
		pebble()
	})
	exec(`INSERT INTO custom_domains (domain) VALUES ($1)`, d)

	jc.WaitCommit("the crashed leader's domain certified by its successor", []string{"certrenew_certificates"}, func() bool {
		return count(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1 AND current`, d) == 1
	})
	crashed.Lock()
	defer crashed.Unlock()
	if crashed.token == 0 {
		t.Fatal("the leader was never crashed")
	}
	var token int64
	var instance string
	if err := jc.DB.QueryRow(context.Background(), `SELECT token, instance FROM certrenew_certificates WHERE domain = $1 AND current`, d).
		Scan(&token, &instance); err != nil {
		t.Fatal(err)
	}
	if token <= crashed.token || instance == crashed.name {
		t.Errorf("stored by %s with token %d; the crashed leader was %s with %d", instance, token, crashed.name, crashed.token)
	}
	if n := count(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1`, d); n != 1 {
		t.Errorf("%d certificates stored for %s, want 1", n, d)
	}
	var lastSeen time.Time
	if err := jc.DB.QueryRow(context.Background(), `SELECT seen_at FROM certrenew_terms WHERE job = $1 AND token = $2`, jobName, crashed.token).
		Scan(&lastSeen); err != nil {
		t.Fatal(err)
	}
	var taken []caEvent
	for _, o := range ca.ordersFor(d) {
		if o.Status < 400 {
			taken = append(taken, o)
		}
	}
	if len(taken) != 1 {
		t.Fatalf("the CA took %d orders for %s, want 1 (the successor's, after the lock-delay)", len(taken), d)
	}
	if earliest := lastSeen.Add(opts.LockDelay); taken[0].At.Before(earliest) {
		t.Errorf("ordered again at %v, before the lock-delay after the crashed term was last seen (%v)", taken[0].At, earliest)
	}
	if n := count(`SELECT count(*) FROM certrenew_orders WHERE domain = $1 AND result = 'abandoned' AND token = $2`, d, crashed.token); n != 1 {
		t.Errorf("the crashed order is not recorded as abandoned")
	}
	if n := count(`SELECT count(*) FROM certrenew_certificates WHERE current`); n != 2 {
		t.Errorf("%d current certificates, want 2", n)
	}
}
