package statuspage

// EndReason says in words why a term ended, from the reason its instance
// recorded (job_terms.reason: the scheduler's end label). The dev
// supervisor's narration says the same words, so that its lines and the
// timeline's tooltips read alike.
func EndReason(label string) string {
	switch label {
	case "resign-request":
		return "resigned at an operator's request (snip-jobs resign)"
	case "resigned":
		return "resigned"
	case "rebalance":
		return "handed over to spread the singletons (rebalance)"
	case "paused":
		return "an operator paused the job (snip-jobs pause): nobody runs it until it is resumed"
	case "drained":
		return "an operator drained its instance (snip-jobs drain): handed over"
	case "shutdown":
		return "its instance shut down and handed over"
	case "watchdog":
		return "resigned by the watchdog: no progress within progress_timeout"
	case "panic":
		return "the job panicked; its instance resigned"
	case "fenced":
		return "a newer term had written: the fence refused its write"
	case "expired":
		return "its lease expired: no keep-alive acknowledged in time"
	case "reclaimed":
		return "its process died, and its host reclaimed its lease (snip-jobs reclaim)"
	case "superseded":
		return "a newer term was recorded before its start could be: it ended while its instance was paused or cut off"
	case "lease-lost":
		return "etcd said its lease was gone (lease-lost)"
	case "key-lost":
		return "its leader key was deleted or replaced (key-lost)"
	}
	return label
}
