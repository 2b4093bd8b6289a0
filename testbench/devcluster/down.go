package devcluster

import (
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"time"

	"github.com/snip/snip-jobs/app/sockact"
)

// downServer answers an instance's port while no process of it runs. The
// supervisor holds the port across restarts (sockact), so without it a
// browser following the banner's link to a killed instance would wait in the
// kernel's backlog for an answer that never comes. It serves on a duplicate
// of the held socket, and closing it leaves the socket for the next process.
type downServer struct {
	srv  *http.Server
	done chan struct{}
}

// serveDown starts answering ch's admin port with the down page, unless a
// process of ch runs again or the cluster is closing.
func (ch *child) serveDown() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.state != stateExited || ch.down != nil || ch.c.closing() {
		return
	}
	ln, err := dupListener(ch.socks)
	if err != nil {
		ch.c.log.Warn("cannot answer the port of an instance that is down", "instance", ch.name, "err", err)
		return
	}
	d := &downServer{done: make(chan struct{}), srv: &http.Server{
		Handler: http.HandlerFunc(ch.downPage), ReadHeaderTimeout: 5 * time.Second,
	}}
	d.srv.SetKeepAlivesEnabled(false) // a browser must not keep talking to us once the instance is back
	go func() {
		defer close(d.done)
		_ = d.srv.Serve(ln)
	}()
	ch.down = d
}

// stopDownLocked stops the down page (ch.mu held) and waits until it no
// longer accepts: the next process gets every connection.
func (ch *child) stopDownLocked() {
	if ch.down == nil {
		return
	}
	_ = ch.down.srv.Close() // its listener (the duplicate) and its connections
	<-ch.down.done
	ch.down = nil
}

func (ch *child) stopDown() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.stopDownLocked()
}

// dupListener is a listener on a duplicate of the admin socket.
func dupListener(socks []sockact.Socket) (net.Listener, error) {
	for _, s := range socks {
		if s.Name != "admin" {
			continue
		}
		f, err := s.Listener.File()
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return net.FileListener(f)
	}
	return nil, errors.New("no admin socket")
}

var downTmpl = template.Must(template.New("down").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Name}} is down · snip-dev</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:15px/1.5 system-ui,sans-serif;margin:2rem auto;max-width:44rem;padding:0 1rem;color:#222}
.down{color:#c0392b}code{background:#f3f3f3;padding:0 .2em}button{font:inherit;padding:.2em .8em}</style></head>
<body>
<h1 id="down" data-instance="{{.Name}}"><span class="down">{{.Name}} is down</span></h1>
<p>Its process is not running ({{.Exit}}). The dev supervisor answers its port meanwhile;
the instance's own page comes back when it is restarted.</p>
{{if .Live}}<p>The cluster as it is now, on the page of an instance that runs:</p>
<ul class="live">{{range .Live}}<li><a href="{{.Page}}">{{.Name}}</a></li>{{end}}</ul>
{{else}}<p>No instance runs.</p>{{end}}
<form method="post" action="{{.Control}}/dev/restart"><input type="hidden" name="instance" value="{{.Name}}"><input type="hidden" name="back" value="{{.Page}}">
<button type="submit" id="restart">restart {{.Name}}</button></form>
<p>or <code>curl -X POST '{{.Control}}/dev/restart?instance={{.Name}}'</code></p>
</body></html>
`))

// downPage answers every path with 503 and the page.
func (ch *child) downPage(w http.ResponseWriter, _ *http.Request) {
	type link struct{ Name, Page string }
	v := struct {
		Name, Exit, Page, Control string
		Live                      []link
	}{Name: ch.name, Exit: ch.info().Exit, Page: ch.page, Control: ch.c.controlURL}
	for _, o := range ch.c.children {
		if o != ch && o.info().State == stateRunning {
			v.Live = append(v.Live, link{o.name, o.page})
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	if err := downTmpl.Execute(w, v); err != nil {
		ch.c.log.Debug("down page", "instance", ch.name, "err", fmt.Sprint(err))
	}
}
