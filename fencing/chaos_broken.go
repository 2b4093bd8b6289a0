//go:build chaos_broken

package fencing

// chaosBrokenNoCheck disables the fence in the deliberately broken
// chaos_broken build: Do runs the caller's function in a plain transaction,
// without advancing or checking the resource's token (and without its row
// lock). Only the fault-injection suite (chaos/, docs/chaos.md) builds with
// this tag, to show that its checker reports the stale writes that then get
// through. Never ship it.
const chaosBrokenNoCheck = true
