package systemdtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Entry is one journal entry.
type Entry struct {
	Time      time.Time // when journald received it (__REALTIME_TIMESTAMP)
	Unit      string    // the unit it is about: UNIT= (systemd's own lines) or _SYSTEMD_UNIT= (the unit's processes)
	PID       int       // the process that logged it (in the container)
	MessageID string    // MESSAGE_ID=, set on systemd's lines about units
	Message   string
	Fields    map[string]string // every field whose value is a string
}

func (e Entry) String() string {
	return fmt.Sprintf("%s %s[%d]: %s", e.Time.Format("15:04:05.000000"), e.Unit, e.PID, e.Message)
}

// Journal follows the container's journal for some units: systemd's lines
// about them and what their processes log, in journald's order. Wait blocks
// on new entries rather than polling.
type Journal struct {
	mu      sync.Mutex
	entries []Entry
	changed chan struct{} // closed and replaced at every new entry
	done    chan struct{} // closed when journalctl ended
	err     error
	cancel  context.CancelFunc
}

// Follow starts following the journal of units (every entry so far, then new
// ones) until ctx ends or Close.
func (c *Container) Follow(ctx context.Context, units ...string) (*Journal, error) {
	ctx, cancel := context.WithCancel(ctx)
	args := []string{"--follow", "--lines=all", "--output=json", "--no-pager"}
	for _, u := range units {
		args = append(args, "--unit="+u)
	}
	cmd := c.Command(ctx, "journalctl", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("nspawn: journalctl: %w", err)
	}
	j := &Journal{changed: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go func() {
		err := j.read(out)
		werr := cmd.Wait()
		j.mu.Lock()
		j.err = fmt.Errorf("journalctl ended: %v %v", err, werr)
		j.mu.Unlock()
		close(j.done)
	}()
	return j, nil
}

func (j *Journal) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		e, err := parseEntry(sc.Bytes())
		if err != nil {
			return err
		}
		j.mu.Lock()
		j.entries = append(j.entries, e)
		close(j.changed)
		j.changed = make(chan struct{})
		j.mu.Unlock()
	}
	return sc.Err()
}

// parseEntry decodes one line of journalctl --output=json. A field journald
// could not store as text (MESSAGE with control characters) is an array of
// byte values.
func parseEntry(line []byte) (Entry, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Entry{}, fmt.Errorf("nspawn: journal entry %.200q: %w", line, err)
	}
	e := Entry{Fields: map[string]string{}}
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) != nil {
			var b []byte
			var ints []int
			if json.Unmarshal(v, &ints) != nil {
				continue
			}
			for _, n := range ints {
				b = append(b, byte(n))
			}
			s = string(b)
		}
		e.Fields[k] = s
	}
	e.Message = e.Fields["MESSAGE"]
	e.MessageID = e.Fields["MESSAGE_ID"]
	e.Unit = e.Fields["UNIT"]
	if e.Unit == "" {
		e.Unit = e.Fields["_SYSTEMD_UNIT"]
	}
	e.PID, _ = strconv.Atoi(e.Fields["_PID"])
	if us, err := strconv.ParseInt(e.Fields["__REALTIME_TIMESTAMP"], 10, 64); err == nil {
		e.Time = time.UnixMicro(us)
	}
	return e, nil
}

// Len is the number of entries read so far.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

// Entries returns the entries read so far.
func (j *Journal) Entries() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Entry(nil), j.entries...)
}

// Wait returns the first entry at index from or later that match accepts,
// and its index, waiting for new entries until ctx ends.
func (j *Journal) Wait(ctx context.Context, from int, match func(Entry) bool) (Entry, int, error) {
	for {
		j.mu.Lock()
		for i := from; i < len(j.entries); i++ {
			if match(j.entries[i]) {
				e := j.entries[i]
				j.mu.Unlock()
				return e, i, nil
			}
		}
		from = max(from, len(j.entries))
		changed, err := j.changed, j.err
		j.mu.Unlock()
		if err != nil {
			return Entry{}, 0, err
		}
		select {
		case <-changed:
		case <-j.done:
		case <-ctx.Done():
			return Entry{}, 0, ctx.Err()
		}
	}
}

// Close stops following.
func (j *Journal) Close() {
	j.cancel()
	<-j.done
}

// Dump is the entries read so far, one a line.
func (j *Journal) Dump() string {
	var b strings.Builder
	for _, e := range j.Entries() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}
