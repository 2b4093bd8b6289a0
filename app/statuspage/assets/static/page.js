// snip-jobs status page: swap in a fresh rendering of the live part every
// second, and send the dev buttons' requests without leaving the page. The page
// works without this script (it reloads itself every 5 s, and the buttons are
// plain forms).
(() => {
  'use strict';
  const live = document.getElementById('live');
  const conn = document.getElementById('conn');
  const down = document.getElementById('down');
  const toast = document.getElementById('toast');
  let busy = false;
  let toastTimer;

  function setConn(ok) {
    conn.textContent = ok ? 'live' : 'not answering';
    conn.className = 'conn ' + (ok ? 'live' : 'stale');
    down.hidden = ok;
  }

  async function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const r = await fetch('live' + location.search, { cache: 'no-store' });
      if (!r.ok) throw new Error(r.status + ' ' + r.statusText);
      live.innerHTML = await r.text();
      setConn(true);
    } catch (e) {
      setConn(false);
    } finally {
      busy = false;
    }
  }

  function say(text) {
    toast.textContent = text;
    toast.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { toast.hidden = true; }, 6000);
  }

  document.addEventListener('submit', async (ev) => {
    const form = ev.target;
    if (!form.matches('form.dev')) return;
    ev.preventDefault();
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      // A "simple" cross-origin request (form body, Accept): no preflight.
      const r = await fetch(form.action, {
        method: 'POST',
        body: new URLSearchParams(new FormData(form)),
        headers: { 'Accept': 'application/json' },
      });
      const body = await r.json();
      say(body.message || body.error || r.statusText);
    } catch (e) {
      say('The dev supervisor did not answer: ' + e.message);
    } finally {
      button.disabled = false;
      refresh();
    }
  });

  setConn(true);
  setInterval(refresh, 1000);
  document.addEventListener('visibilitychange', refresh);
})();
