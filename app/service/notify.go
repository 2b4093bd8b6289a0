package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifier tells systemd (Type=notify) about the service's state. Without
// $NOTIFY_SOCKET every call is a no-op.
type notifier struct {
	log *slog.Logger
}

func (n notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.log.Warn("cannot notify systemd", "state", state, "err", err)
	}
}

func (n notifier) ready(status string)  { n.send(daemon.SdNotifyReady + "\nSTATUS=" + status) }
func (n notifier) stopping()            { n.send(daemon.SdNotifyStopping + "\nSTATUS=stopping") }
func (n notifier) status(status string) { n.send("STATUS=" + status) }

// watchdog pings systemd's watchdog at half of WATCHDOG_USEC until ctx ends,
// but only while healthy() returns nil: a process whose session or scheduler is
// stuck stops pinging, and systemd restarts it after WatchdogSec. Without a
// watchdog configured it returns at once.
func (n notifier) watchdog(ctx context.Context, healthy func() error, status func() string) {
	every, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Warn("systemd watchdog settings unreadable; not pinging", "err", err)
		return
	}
	if every <= 0 {
		return
	}
	every /= 2
	n.log.Info("pinging the systemd watchdog", "every", every)
	t := time.NewTicker(every)
	defer t.Stop()
	wasHealthy := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := healthy(); err != nil {
			if wasHealthy {
				n.log.Error("unhealthy: no longer pinging the systemd watchdog; systemd restarts the service unless this clears", "err", err)
			}
			wasHealthy = false
			n.status("unhealthy: " + err.Error())
			continue
		}
		if !wasHealthy {
			n.log.Info("healthy again: pinging the systemd watchdog")
		}
		wasHealthy = true
		n.send(daemon.SdNotifyWatchdog + "\nSTATUS=" + status())
	}
}
