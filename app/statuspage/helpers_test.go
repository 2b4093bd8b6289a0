package statuspage

import (
	"io"
	"net/http"
	"strconv"
	"testing"
)

// get fetches url, checks the status code and returns the body.
func get(t *testing.T, url string, code int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %d, want %d\n%s", url, resp.StatusCode, code, b)
	}
	return string(b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
