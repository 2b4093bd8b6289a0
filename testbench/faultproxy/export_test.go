package faultproxy

// OnRead makes p call f each time it has read a chunk and set its latency.
// Set it before the first connection.
func (p *Proxy) OnRead(f func()) { p.onRead = f }
