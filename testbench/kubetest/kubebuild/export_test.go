package kubebuild

// BuildFiles exposes the throwaway build module to the tests.
var BuildFiles = buildFiles
