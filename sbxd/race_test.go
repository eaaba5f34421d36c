//go:build race

package sbxd_test

const raceEnabled = true
