package kubelease

// SetAfterWin sets the hook run between a winning write's answer and the
// deadline check (before the session campaigns).
func SetAfterWin(s *Session, f func()) { s.afterWin = f }
