package configs_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
)

// fakeTypes knows the three job types of the example file, with tiny options.
type fakeTypes struct{}

type certOptions struct {
	Email   string   `yaml:"email"`
	Domains []string `yaml:"domains"`
}

func (o *certOptions) Validate() error {
	var errs []error
	if o.Email == "" {
		errs = append(errs, errors.New("email is required"))
	}
	if len(o.Domains) == 0 {
		errs = append(errs, errors.New("at least one domain is required"))
	}
	return errors.Join(errs...)
}

type aggregatorOptions struct {
	BatchSize  int           `yaml:"batch_size"`
	FlushEvery time.Duration `yaml:"flush_every"`
}

// Validate reports a negative batch size as being about that option.
func (o *aggregatorOptions) Validate() error {
	if o.BatchSize < 0 {
		return errors.Join(errors.New("something about the whole"), &configs.OptionError{Key: "batch_size", Err: fmt.Errorf("%d is negative", o.BatchSize)})
	}
	return nil
}

type reportOptions struct {
	Recipients []string `yaml:"recipients"`
	Title      string   `yaml:"title"`
}

func newCertOptions() certOptions             { return certOptions{} }
func newAggregatorOptions() aggregatorOptions { return aggregatorOptions{BatchSize: 1000} }
func newReportOptions() reportOptions         { return reportOptions{Title: "Weekly clicks"} }

func (fakeTypes) Options(jobType string) (configs.OptionsType, bool) {
	switch jobType {
	case "certrenew":
		return configs.OptionsOf(newCertOptions), true
	case "aggregator":
		return configs.OptionsOf(newAggregatorOptions), true
	case "weeklyreport":
		return configs.OptionsOf(newReportOptions), true
	}
	return nil, false
}

// decoded is j's options as its type decodes them, failing the test on a problem.
func decoded[T any](t *testing.T, j configs.Job, defaults func() T) *T {
	t.Helper()
	v, err := configs.DecodeOptions(j, defaults)
	if err != nil {
		t.Fatalf("job %s: DecodeOptions: %v", j.Name, err)
	}
	return &v
}

func (fakeTypes) Names() []string { return []string{"weeklyreport", "certrenew", "aggregator"} }

// lines joins its arguments as the lines of a file: argument i is line i+1.
func lines(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }

// parse parses data as "test.yaml" with fakeTypes.
func parse(data []byte) (*configs.File, error) {
	return configs.Parse("test.yaml", data, fakeTypes{})
}

// mustParse parses data and fails the test on any problem.
func mustParse(t *testing.T, data []byte) *configs.File {
	t.Helper()
	f, err := parse(data)
	if err != nil {
		t.Fatalf("Parse: unexpected problems:\n%v", err)
	}
	return f
}

// problems parses data, which must be rejected, and returns the problems.
func problems(t *testing.T, data []byte) configs.Errors {
	t.Helper()
	f, err := parse(data)
	if err == nil {
		t.Fatalf("Parse accepted the file; want problems. File:\n%s", data)
	}
	if f != nil {
		t.Errorf("Parse returned a File along with problems")
	}
	var errs configs.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse error is %T, want configs.Errors: %v", err, err)
	}
	return errs
}

// findProblem returns the problem at line whose text contains phrase.
func findProblem(errs configs.Errors, line int, phrase string) *configs.Error {
	for _, e := range errs {
		if e.Pos.Line == line && strings.Contains(e.Error(), phrase) {
			return e
		}
	}
	return nil
}

func dump(errs configs.Errors) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s", e)
	}
	return b.String()
}
