package aggregator

import (
	"errors"
	"fmt"
	"time"
)

// Options are the settings of an aggregator job (the config's options:).
type Options struct {
	// BatchSize is about how many events one transaction folds. A batch is
	// never smaller than one producer transaction's events, so it can exceed
	// this. Larger batches fold a backlog much faster (each batch writes one
	// row per link and hour it saw, whatever its number of events, and a wide
	// range is read sequentially rather than through the index) but hold
	// their transaction longer: about 0.4 s per million events here. A live
	// stream makes small batches anyway. Default 4000000.
	BatchSize int `yaml:"batch_size" json:"batch_size"`
	// Interval is how often batches start once the job has caught up (a
	// batch that took longer is followed at once by the next): the bound on
	// how long a committed click waits before a batch looks for it.
	// Default 100ms.
	Interval time.Duration `yaml:"interval" json:"interval"`
	// Retention is how long processed events stay in click_events after they
	// were folded (to about a minute); 0 deletes them as soon as the job is
	// idle. Default 0.
	Retention time.Duration `yaml:"retention" json:"retention"`
	// MaxFutureSkew is how far after the fold's time a click's clicked_at may
	// be (redirect servers' clocks drift); later ones are rejected as
	// "future". Default 5m.
	MaxFutureSkew time.Duration `yaml:"max_future_skew" json:"max_future_skew"`
	// MaxAge is how far before the fold's time a click's clicked_at may be;
	// older ones are rejected as "too_old" (a broken clock, not a backlog).
	// Default 720h (30 days).
	MaxAge time.Duration `yaml:"max_age" json:"max_age"`
}

// Limits of the options.
const (
	MaxBatchSize = 10_000_000
	MaxInterval  = time.Hour
)

// DefaultOptions returns the options a job gets when its config sets none.
func DefaultOptions() Options {
	return Options{
		BatchSize:     4_000_000,
		Interval:      100 * time.Millisecond,
		MaxFutureSkew: 5 * time.Minute,
		MaxAge:        30 * 24 * time.Hour,
	}
}

// Validate reports every option out of range.
func (o *Options) Validate() error {
	var errs []error
	if o.BatchSize < 1 || o.BatchSize > MaxBatchSize {
		errs = append(errs, fmt.Errorf("batch_size must be from 1 to %d, not %d", MaxBatchSize, o.BatchSize))
	}
	if o.Interval <= 0 || o.Interval > MaxInterval {
		errs = append(errs, fmt.Errorf("interval must be more than 0 and at most %s, not %s", MaxInterval, o.Interval))
	}
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("retention must not be negative (0 deletes processed events), not %s", o.Retention))
	}
	if o.MaxFutureSkew < 0 {
		errs = append(errs, fmt.Errorf("max_future_skew must not be negative, not %s", o.MaxFutureSkew))
	}
	if o.MaxAge <= 0 {
		errs = append(errs, fmt.Errorf("max_age must be more than 0, not %s", o.MaxAge))
	}
	return errors.Join(errs...)
}
