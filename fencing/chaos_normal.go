//go:build !chaos_broken

package fencing

// chaosBrokenNoCheck is false: Do checks and advances the token. Its twin in
// chaos_broken.go (build tag chaos_broken, used only by the fault-injection
// suite in chaos/ to show that its checker catches a broken build) is true.
const chaosBrokenNoCheck = false
